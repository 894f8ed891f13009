package batch

import (
	"context"
	"sync"
)

// entry is one accepted item and, once its batch completes, its outcome.
// Entries are pooled: a synchronous caller returns its entry after reading
// the outcome, the flusher returns an asynchronous one after its callback.
type entry[T, R any] struct {
	ctx  context.Context
	item T
	size int64
	at   int64          // when it entered the buffer, ns since the accumulator's epoch
	cb   func(R, error) // nil for a synchronous caller
	done chan struct{}  // capacity 1; signalled once the outcome is set (sync only)
	res  R
	err  error
}

// queue is the state of one key: its buffer, oldest first, and how many of
// its batches are in flight.
type queue[K comparable, T, R any] struct {
	key K

	mu       sync.Mutex
	pending  []*entry[T, R]
	bytes    int64 // bytes of pending
	inflight int
	used     bool  // an item arrived since the last tick
	idleFrom int64 // the first tick that found the key unused and empty, or 0
	dead     bool  // removed from the accumulator's map; look the key up again
}

func (q *queue[K, T, R]) push(e *entry[T, R]) {
	q.pending = append(q.pending, e)
	q.bytes += e.size
	q.used = true
}

// full reports whether the oldest batch of the buffer is sealed: it reached
// a cap, or the next item does not fit in it.
func (q *queue[K, T, R]) full(lim *Limits) bool {
	return q.bytes >= int64(lim.BatchMaxBytes) ||
		(lim.BatchMaxCount > 0 && len(q.pending) >= lim.BatchMaxCount)
}

// batch is one flush: the entries sent, the entries dropped on the way
// because their context ended, and the reason it left. Batches are pooled.
type batch[K comparable, T, R any] struct {
	q            *queue[K, T, R]
	reason       reason
	entries      []*entry[T, R]
	items        []T
	results      []Result[R] // the flush function's, one per item
	bytes        int64
	skipped      []*entry[T, R]
	skippedBytes int64
	async        int // entries and skipped entries with a callback
}

// take moves the oldest batch out of the buffer: items in order until a cap
// would be passed (at least one item, so an oversized item goes alone).
// Items whose context has ended are moved to skipped instead of being sent.
// It counts the batch as in flight when it has anything to send.
func (q *queue[K, T, R]) take(b *batch[K, T, R], lim *Limits) {
	maxBytes, maxCount := int64(lim.BatchMaxBytes), lim.BatchMaxCount
	i := 0
	for ; i < len(q.pending); i++ {
		e := q.pending[i]
		if e.cb != nil {
			b.async++
		}
		if e.ctx.Err() != nil {
			b.skipped = append(b.skipped, e)
			b.skippedBytes += e.size
			q.bytes -= e.size
			continue
		}
		if len(b.entries) > 0 && (b.bytes+e.size > maxBytes || (maxCount > 0 && len(b.entries) >= maxCount)) {
			if e.cb != nil {
				b.async--
			}
			break
		}
		b.entries = append(b.entries, e)
		b.items = append(b.items, e.item)
		b.bytes += e.size
		q.bytes -= e.size
	}
	n := copy(q.pending, q.pending[i:])
	clear(q.pending[n:])
	q.pending = q.pending[:n]
	if len(b.entries) > 0 {
		q.inflight++
	}
}
