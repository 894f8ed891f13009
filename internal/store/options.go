package store

import (
	"fmt"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

// FS is the file-system seam (see package vfs); nil in Options means the OS.
type FS = vfs.FS

// FlushMode chooses when appended data is fsynced.
type FlushMode int

const (
	// FlushAsync fsyncs periodically (Options.FlushInterval); an append
	// returns once its bytes are in the file (Durability Buffered).
	FlushAsync FlushMode = iota
	// FlushSync makes each append wait for an fsync that covers it; appenders
	// that arrive during one fsync share the next (group commit). Readers see
	// only flushed messages.
	FlushSync
)

// Defaults and limits of Options.
const (
	DefaultSegmentSize        = 1 << 30
	MinSegmentSize            = 1 << 20
	DefaultMaxMessageSize     = 4 << 20
	DefaultFlushInterval      = 500 * time.Millisecond
	DefaultDispatchChunk      = 4 << 20
	DefaultCheckpointInterval = 5 * time.Second
	DefaultCQFileEntries      = 300_000
	DefaultCloseTimeout       = 30 * time.Second
)

// Options configure a Store. The zero value of every field but Dir means its
// default.
type Options struct {
	// Dir holds the store's files (created if missing).
	Dir string
	// FS is the file system; nil means the OS.
	FS FS
	// SegmentSize is the size of one commit-log segment file, default 1 GiB,
	// at least 1 MiB.
	SegmentSize int64
	// MaxMessageSize bounds body + properties + topic + tag + born host of
	// one message, default 4 MiB (a quarter of the segment for segments
	// under 16 MiB).
	MaxMessageSize int
	Flush          FlushMode
	// FlushInterval is the period of the async flush, default 500ms.
	FlushInterval time.Duration
	// DispatchChunk is how much log the index reader hands to a worker at a
	// time, default 4 MiB.
	DispatchChunk int
	// DispatchWorkers decode and CRC-check chunks in parallel, default
	// GOMAXPROCS.
	DispatchWorkers int
	// RetentionBytes and RetentionAge bound the log; whole segments past
	// either limit are deleted. 0 keeps everything.
	RetentionBytes int64
	RetentionAge   time.Duration
	// CheckpointInterval is how often the consume queues are written and
	// synced and the checkpoint moved; after a crash, recovery rescans the
	// log from the last checkpoint. Default 5s.
	CheckpointInterval time.Duration
	// CQFileEntries is how many entries one consume-queue file holds before
	// the next file starts, default 300,000.
	CQFileEntries int
	// CloseTimeout bounds how long Close waits for the index to catch up
	// with the log, default 30s. Past it Close stops the index where it is,
	// skips the final checkpoint and keeps the abort marker, so the next
	// Open rescans the log from the last checkpoint and rebuilds the missing
	// queue entries: nothing is lost, the next Open is only slower.
	CloseTimeout time.Duration
	// Logger receives the store's logs; nil means none.
	Logger *zap.Logger

	// dispatchDelay, set only by this package's tests, makes the index's
	// ordered stage wait this long before applying each chunk, so that a
	// test can make the index lag behind the log for real.
	dispatchDelay time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("store: Options.Dir is empty: %w", ErrInvalidOptions)
	}
	if o.FS == nil {
		o.FS = vfs.OS()
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.SegmentSize < MinSegmentSize {
		return o, fmt.Errorf("store: SegmentSize %d below %d: %w", o.SegmentSize, MinSegmentSize, ErrInvalidOptions)
	}
	if o.MaxMessageSize == 0 {
		o.MaxMessageSize = int(min(DefaultMaxMessageSize, o.SegmentSize/4))
	}
	if o.MaxMessageSize < 0 || int64(o.MaxMessageSize)+headerSize+1024 > o.SegmentSize {
		return o, fmt.Errorf("store: MaxMessageSize %d does not fit a segment of %d: %w", o.MaxMessageSize, o.SegmentSize, ErrInvalidOptions)
	}
	if o.Flush != FlushAsync && o.Flush != FlushSync {
		return o, fmt.Errorf("store: unknown flush mode %d: %w", o.Flush, ErrInvalidOptions)
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.DispatchChunk <= 0 {
		o.DispatchChunk = DefaultDispatchChunk
	}
	if o.DispatchWorkers <= 0 {
		o.DispatchWorkers = runtime.GOMAXPROCS(0)
	}
	if o.RetentionBytes < 0 || o.RetentionAge < 0 {
		return o, fmt.Errorf("store: negative retention: %w", ErrInvalidOptions)
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.CQFileEntries <= 0 {
		o.CQFileEntries = DefaultCQFileEntries
	}
	if o.CloseTimeout < 0 {
		return o, fmt.Errorf("store: negative CloseTimeout: %w", ErrInvalidOptions)
	}
	if o.CloseTimeout == 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}
