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

	// state and stop are guarded by the mutex of the entry's queue.
	state entryState
	// stop cancels the withdrawal that an asynchronous entry left waiting
	// in a buffer has registered on its context (see Accumulator.watch).
	stop func() bool
	// keep: the entry must not go back to the pool, as a withdrawal may
	// still look at it (its stop came too late) or its buffer still
	// holds it (withdrawn).
	keep bool
}

// entryState is where an entry stands in its queue.
type entryState uint8

const (
	queued    entryState = iota // in the buffer
	taken                       // in a batch: its outcome is the batch's
	withdrawn                   // its context ended in the buffer: left unsent
)

// queue is the state of one key: its buffer, oldest first, and how many of
// its batches are in flight.
type queue[K comparable, T, R any] struct {
	key K

	mu sync.Mutex
	// pending is the buffer, oldest first. Entries withdrawn from its
	// middle stay until take drops them (withdrawn counts them); its first
	// entry is never a withdrawn one.
	pending   []*entry[T, R]
	withdrawn int
	// watched: the entries pending[:watched] need no more looking at by
	// the ticker (see Accumulator.sweepLocked): their context is watched,
	// can never end, or is a synchronous caller's, or they are withdrawn.
	watched  int
	bytes    int64 // bytes of pending, withdrawn entries excluded
	inflight int
	used     bool  // an item arrived since the last tick
	idleFrom int64 // the first tick that found the key unused and empty, or 0
	dead     bool  // removed from the accumulator's map; look the key up again
}

func (q *queue[K, T, R]) push(e *entry[T, R]) {
	q.pending = append(q.pending, e)
	q.bytes += e.size
	q.used = true
	if q.watched == len(q.pending)-1 && (e.cb == nil || e.ctx.Done() == nil) {
		// Nothing for the ticker to watch (see Accumulator.sweepLocked):
		// spare it a look at an entry no longer in the cache.
		q.watched++
	}
}

// full reports whether the oldest batch of the buffer is sealed: it reached
// a cap, or the next item does not fit in it.
func (q *queue[K, T, R]) full(lim *Limits) bool {
	return q.bytes >= int64(lim.BatchMaxBytes) ||
		(lim.BatchMaxCount > 0 && len(q.pending)-q.withdrawn >= lim.BatchMaxCount)
}

// withdraw takes e out of the buffer if it is still there, and reports
// whether it was. An entry in the middle of the buffer is only marked (take
// drops it later): a buffer whose entries are withdrawn one by one, as when
// many sends share a context that ends, costs no copying per entry.
func (q *queue[K, T, R]) withdraw(e *entry[T, R]) bool {
	if e.state != queued {
		return false
	}
	e.state = withdrawn
	e.keep = true
	q.bytes -= e.size
	q.withdrawn++
	// Keep the first entry a live one, which readyLocked and the ticker
	// rely on.
	for len(q.pending) > 0 && q.pending[0].state == withdrawn {
		q.pending[0] = nil
		q.pending = q.pending[1:]
		q.withdrawn--
		q.watched = max(q.watched-1, 0)
	}
	if len(q.pending) == 0 {
		q.pending = nil
	}
	return true
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
		if e.state == withdrawn {
			// It has had its outcome already.
			q.pending[i] = nil
			q.withdrawn--
			continue
		}
		ended := e.ctx.Err() != nil
		if !ended && len(b.entries) > 0 && (b.bytes+e.size > maxBytes || (maxCount > 0 && len(b.entries) >= maxCount)) {
			break
		}
		e.state = taken
		if e.stop != nil && !e.stop() {
			// Its context ended just now: the withdrawal has started and
			// will find the entry taken. It must not find it reused.
			e.keep = true
		}
		e.stop = nil
		if e.cb != nil {
			b.async++
		}
		if ended {
			b.skipped = append(b.skipped, e)
			b.skippedBytes += e.size
			q.bytes -= e.size
			continue
		}
		b.entries = append(b.entries, e)
		b.items = append(b.items, e.item)
		b.bytes += e.size
		q.bytes -= e.size
	}
	n := copy(q.pending, q.pending[i:])
	clear(q.pending[n:])
	q.pending = q.pending[:n]
	q.watched = max(q.watched-i, 0)
	if len(b.entries) > 0 {
		q.inflight++
	}
}
