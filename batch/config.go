package batch

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Errors returned by the accumulator. They are wrapped with context; test
// them with errors.Is.
var (
	// ErrClosed is returned by Add and AddAsync after Close, and given to
	// items whose batch could not start before Close gave up.
	ErrClosed = errors.New("batch: accumulator closed")
	// ErrBufferFull is returned in FailFast mode when an item does not fit
	// under TotalBatchMaxBytes right now.
	ErrBufferFull = errors.New("batch: buffer full")
	// ErrTooLarge is returned for an item larger than TotalBatchMaxBytes: it
	// could never be accepted.
	ErrTooLarge = errors.New("batch: item larger than the total buffer")
	// ErrInvalidSize is returned for a negative item size.
	ErrInvalidSize = errors.New("batch: invalid item size")
	// ErrNilCallback is returned by AddAsync without a callback.
	ErrNilCallback = errors.New("batch: nil callback")
	// ErrInvalidConfig is returned by New and SetLimits for bad settings.
	ErrInvalidConfig = errors.New("batch: invalid config")
	// ErrNotSent is wrapped, together with the context's error, in the
	// error of an item whose context ended before the item reached the
	// flush function: while it waited for room under TotalBatchMaxBytes
	// or in its key's buffer. Such an item was not sent.
	ErrNotSent = errors.New("not sent")
)

// Defaults applied to zero fields of Config.
const (
	DefaultMaxDelay           = 10 * time.Millisecond
	DefaultBatchMaxBytes      = 256 << 10
	DefaultTotalBatchMaxBytes = 32 << 20
	DefaultMaxInflightPerKey  = 1

	minMaxDelay = time.Millisecond
	maxMaxDelay = time.Minute
)

// Limits are the settings that can change while the accumulator runs (see
// Accumulator.SetLimits). Zero fields take their defaults.
type Limits struct {
	// MaxDelay bounds how long an item waits in a buffer while its key is
	// busy (or always, with Config.Linger). Default 10 ms; 1 ms to 1 min.
	MaxDelay time.Duration
	// BatchMaxBytes is the size at which a batch is sealed. A single item
	// larger than this goes alone. Default 256 KiB.
	BatchMaxBytes int
	// BatchMaxCount seals a batch at this many items; 0 means no count
	// limit.
	BatchMaxCount int
	// TotalBatchMaxBytes caps the bytes of all accepted items not yet
	// completed, buffered and in flight, over all keys. Default 32 MiB; it
	// must be at least BatchMaxBytes.
	TotalBatchMaxBytes int64
}

// Config configures an Accumulator. It is validated once, by New.
type Config struct {
	Limits

	// FailFast makes Add and AddAsync return ErrBufferFull instead of
	// blocking while TotalBatchMaxBytes is reached.
	FailFast bool
	// Linger makes buffers wait until full or MaxDelay old even when their
	// key is idle: bigger batches, higher latency. Off by default (see the
	// package doc for the default policy).
	Linger bool
	// MaxInflightPerKey is how many batches of one key may be in flight at
	// once. Default 1, which also keeps order across batches.
	MaxInflightPerKey int
	// Logger receives flush failures (debug) and contract violations of the
	// flush function (error). Default: no logging.
	Logger *zap.Logger
	// Registerer receives the accumulator's collectors. Nil: no metrics.
	Registerer prometheus.Registerer
}

func (l Limits) withDefaults() Limits {
	if l.MaxDelay == 0 {
		l.MaxDelay = DefaultMaxDelay
	}
	if l.BatchMaxBytes == 0 {
		l.BatchMaxBytes = DefaultBatchMaxBytes
	}
	if l.TotalBatchMaxBytes == 0 {
		l.TotalBatchMaxBytes = DefaultTotalBatchMaxBytes
		if int64(l.BatchMaxBytes) > l.TotalBatchMaxBytes {
			l.TotalBatchMaxBytes = int64(l.BatchMaxBytes)
		}
	}
	return l
}

func (l Limits) validate() error {
	switch {
	case l.MaxDelay < minMaxDelay || l.MaxDelay > maxMaxDelay:
		return fmt.Errorf("%w: MaxDelay %v outside [%v, %v]", ErrInvalidConfig, l.MaxDelay, minMaxDelay, maxMaxDelay)
	case l.BatchMaxBytes < 0:
		return fmt.Errorf("%w: BatchMaxBytes %d is negative", ErrInvalidConfig, l.BatchMaxBytes)
	case l.BatchMaxCount < 0:
		return fmt.Errorf("%w: BatchMaxCount %d is negative", ErrInvalidConfig, l.BatchMaxCount)
	case l.TotalBatchMaxBytes < 0:
		return fmt.Errorf("%w: TotalBatchMaxBytes %d is negative", ErrInvalidConfig, l.TotalBatchMaxBytes)
	case l.TotalBatchMaxBytes < int64(l.BatchMaxBytes):
		return fmt.Errorf("%w: TotalBatchMaxBytes %d is below BatchMaxBytes %d; raise it to at least one batch",
			ErrInvalidConfig, l.TotalBatchMaxBytes, l.BatchMaxBytes)
	}
	return nil
}

// tick is the ticker period for a MaxDelay.
func (l Limits) tick() time.Duration {
	return l.MaxDelay / 2
}

func (c Config) normalize() (Config, error) {
	c.Limits = c.Limits.withDefaults()
	if err := c.Limits.validate(); err != nil {
		return c, err
	}
	if c.MaxInflightPerKey < 0 {
		return c, fmt.Errorf("%w: MaxInflightPerKey %d is negative", ErrInvalidConfig, c.MaxInflightPerKey)
	}
	if c.MaxInflightPerKey == 0 {
		c.MaxInflightPerKey = DefaultMaxInflightPerKey
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}
