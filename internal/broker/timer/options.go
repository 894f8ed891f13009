package timer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store"
)

// SystemTopic is the store topic that holds scheduled messages until they
// are delivered (RocketMQ's TimerMessageStore topic).
const SystemTopic = "rmq_sys_wheel_timer"

// Property keys the timer writes into the messages of SystemTopic.
const (
	PropRealTopic   = "REAL_TOPIC"
	PropRealQueue   = "REAL_QID"
	PropDeliverAt   = "TIMER_DELIVER_MS"
	PropRollTimes   = "TIMER_ROLL_TIMES"
	PropEnqueueTime = "TIMER_ENQUEUE_MS"
)

// Defaults of Options.
const (
	DefaultPrecision          = 10 * time.Millisecond
	DefaultSlots              = 4096
	DefaultMaxDelay           = 3 * 24 * time.Hour
	DefaultRollWindow         = 2 * 24 * time.Hour
	DefaultCheckpointInterval = time.Second
	DefaultSegmentRecords     = 1 << 16
)

// Errors of the timer. Errors wrap one of these or a store or file error.
var (
	// ErrInvalidOptions: Options that cannot work.
	ErrInvalidOptions = errors.New("timer: invalid options")
	// ErrDelayTooLong: the delivery time is more than MaxDelay ahead.
	ErrDelayTooLong = errors.New("timer: delivery time beyond the maximum delay")
	// ErrInvalidMessage: a message without a destination topic, or a
	// negative queue id.
	ErrInvalidMessage = errors.New("timer: invalid message")
	// ErrClosed: the timer was closed.
	ErrClosed = errors.New("timer: closed")
	// ErrCorrupt: a timer log record or checkpoint that fails its checks.
	ErrCorrupt = errors.New("timer: corrupt data")
)

// Deliverer puts a due message into its real topic. The broker implements
// it by appending to the store; msg.Topic and msg.QueueID name the
// destination and msg.Properties still hold TIMER_DELIVER_MS. An error makes
// the timer retry the delivery until it succeeds or the timer closes.
type Deliverer interface {
	Deliver(ctx context.Context, msg store.Message) error
}

// DelivererFunc adapts a function to Deliverer.
type DelivererFunc func(ctx context.Context, msg store.Message) error

// Deliver calls f.
func (f DelivererFunc) Deliver(ctx context.Context, msg store.Message) error { return f(ctx, msg) }

// Clock is the timer's source of time, replaceable in tests.
type Clock interface {
	Now() time.Time
	// Timer returns a channel that receives once d has elapsed, and a
	// function that stops it.
	Timer(d time.Duration) (<-chan time.Time, func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// RealClock returns the wall clock.
func RealClock() Clock { return realClock{} }

// Options configure a Timer. Zero fields take their defaults.
type Options struct {
	// Dir holds the timer log and checkpoint (created if missing). Required.
	Dir string
	// FS is the file system (nil: the OS), as in the store.
	FS store.FS
	// Store keeps the scheduled messages in SystemTopic. Required; the timer
	// does not close it.
	Store *store.Store
	// Deliverer receives due messages. Required.
	Deliverer Deliverer
	// Precision is the span of one wheel slot, 1 ms .. 1 s (default 10 ms).
	// A message is delivered within about one Precision after its time.
	Precision time.Duration
	// Slots is the number of slots of the fine wheel, a power of two
	// (default 4096).
	Slots int
	// MaxDelay bounds how far ahead a delivery time may be (default 3 days,
	// RocketMQ's timerMaxDelaySec).
	MaxDelay time.Duration
	// RollWindow: longer waits are rolled over at this distance (default
	// 2 days, RocketMQ's timerRollWindowSlot).
	RollWindow time.Duration
	// CheckpointInterval is how often the checkpoint is written when it
	// moved (default 1 s); it bounds the redeliveries after a crash.
	CheckpointInterval time.Duration
	// SegmentRecords is the number of records per timer log file (default
	// 65536, 2.5 MiB).
	SegmentRecords int
	// Clock defaults to the wall clock.
	Clock Clock
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("%w: Dir is empty", ErrInvalidOptions)
	}
	if o.Store == nil {
		return o, fmt.Errorf("%w: Store is nil", ErrInvalidOptions)
	}
	if o.Deliverer == nil {
		return o, fmt.Errorf("%w: Deliverer is nil", ErrInvalidOptions)
	}
	if o.FS == nil {
		o.FS = osFS()
	}
	if o.Precision == 0 {
		o.Precision = DefaultPrecision
	}
	if o.Precision < time.Millisecond || o.Precision > time.Second || o.Precision%time.Millisecond != 0 {
		return o, fmt.Errorf("%w: Precision %s (want whole milliseconds in 1ms..1s)", ErrInvalidOptions, o.Precision)
	}
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.Slots < 2 || o.Slots > 1<<22 || o.Slots&(o.Slots-1) != 0 {
		return o, fmt.Errorf("%w: Slots %d (want a power of two in 2..4M)", ErrInvalidOptions, o.Slots)
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.RollWindow == 0 {
		o.RollWindow = DefaultRollWindow
	}
	if o.MaxDelay < 0 || o.RollWindow < o.Precision {
		return o, fmt.Errorf("%w: MaxDelay %s, RollWindow %s", ErrInvalidOptions, o.MaxDelay, o.RollWindow)
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.SegmentRecords == 0 {
		o.SegmentRecords = DefaultSegmentRecords
	}
	if o.SegmentRecords < 1 {
		return o, fmt.Errorf("%w: SegmentRecords %d", ErrInvalidOptions, o.SegmentRecords)
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}
