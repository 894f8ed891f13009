package store

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by the store wrap one of these (check with
// errors.Is) or an I/O error from the file system.
var (
	// ErrMessageTooLarge: one message (body + properties + topic + tag + host)
	// is over Options.MaxMessageSize, or a batch does not fit in one segment.
	ErrMessageTooLarge = errors.New("store: message too large")
	// ErrEmptyBatch: Append was called with no message.
	ErrEmptyBatch = errors.New("store: empty batch")
	// ErrMixedBatch: the messages of one Append name different topics or queues.
	ErrMixedBatch = errors.New("store: batch mixes topics or queues")
	// ErrInvalidMessage: a bad topic name, a negative queue id, an over-long
	// field.
	ErrInvalidMessage = errors.New("store: invalid message")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrCorrupt: bytes that fail their length, magic or CRC check. Such a
	// record is never returned to a reader.
	ErrCorrupt = errors.New("store: corrupt data")
	// ErrOffsetOutOfRange: a read below the queue's min or above its max
	// offset. The error also holds an *OffsetRangeError with the valid range.
	ErrOffsetOutOfRange = errors.New("store: offset out of range")
	// ErrFailed: an earlier write or fsync failed in a way that leaves the
	// file contents unknown; the store refuses further appends until it is
	// reopened (and recovered).
	ErrFailed = errors.New("store: failed after an I/O error")
	// ErrNotDurable: a sync-flush append was written but the wait for its
	// fsync ended (context done or fsync error). The message may or may not
	// survive a crash.
	ErrNotDurable = errors.New("store: append not confirmed durable")
)

// OffsetRangeError says which offsets of a queue are valid. It matches
// ErrOffsetOutOfRange under errors.Is.
type OffsetRangeError struct {
	Topic    string
	QueueID  int32
	Offset   int64
	Min, Max int64 // valid offsets are [Min, Max]; Max is the next offset to be written
}

func (e *OffsetRangeError) Error() string {
	return fmt.Sprintf("store: offset %d of %s/%d out of range [%d, %d]", e.Offset, e.Topic, e.QueueID, e.Min, e.Max)
}

// Is makes errors.Is(err, ErrOffsetOutOfRange) hold.
func (e *OffsetRangeError) Is(target error) bool { return target == ErrOffsetOutOfRange }

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// ErrInvalidOptions: Options or TopicOptions that cannot work.
var ErrInvalidOptions = errors.New("store: invalid options")
