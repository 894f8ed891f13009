package batch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// budget is the TotalBatchMaxBytes reservation. The uncontended path is one
// compare-and-swap; callers that do not fit queue in FIFO order and are
// granted their bytes by whoever releases enough. All waiters that fit are
// woken together: waking them one at a time would trickle items into the
// buffers and make single-item batches.
type budget struct {
	used  atomic.Int64
	limit atomic.Int64
	// nwait counts queued waiters; while it is non-zero the fast path stays
	// out of the way so that waiters are served first.
	nwait atomic.Int32

	mu      sync.Mutex
	waiters []*waiter
	closed  bool
}

type waiter struct {
	n     int64
	ready chan struct{} // closed when granted or failed
	done  bool          // guarded by budget.mu
	err   error         // guarded by budget.mu; set before ready is closed
}

func newBudget(limit int64) *budget {
	b := &budget{}
	b.limit.Store(limit)
	return b
}

// cas reserves n bytes if they fit.
func (b *budget) cas(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit.Load() {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// acquire reserves n bytes, blocking until they fit, ctx ends or the budget
// is closed. On error nothing is reserved.
func (b *budget) acquire(ctx context.Context, n int64, failFast bool) error {
	if b.nwait.Load() == 0 && b.cas(n) {
		return nil
	}
	if failFast {
		if lim := b.limit.Load(); n > lim {
			return tooLarge(n, lim)
		}
		return fmt.Errorf("%w: %d bytes buffered, cap %d", ErrBufferFull, b.used.Load(), b.limit.Load())
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	// The caller checked n against the cap it saw, but SetLimits may have
	// lowered it since. A waiter that can never fit must not join the queue:
	// at its head it would block every waiter behind it for good. Checked
	// under mu, so setLimit either sees this waiter queued or we see its cap.
	if lim := b.limit.Load(); n > lim {
		b.mu.Unlock()
		return tooLarge(n, lim)
	}
	b.nwait.Add(1)
	// Retry once the waiter is counted: a release that ran before the count
	// went up did not look for waiters, and its bytes must not be missed.
	if len(b.waiters) == 0 && b.cas(n) {
		b.nwait.Add(-1)
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if w.done {
		// Granted (or failed) while ctx ended: give back what was granted.
		err := w.err
		b.mu.Unlock()
		if err == nil {
			b.release(n)
		}
		return notSent("waiting for buffer space", ctx.Err())
	}
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			break
		}
	}
	b.nwait.Add(-1)
	// This waiter may have been the head that blocked smaller ones.
	b.grantLocked()
	b.mu.Unlock()
	return fmt.Errorf("batch: waiting for buffer space: %w", ctx.Err())
}

// release gives back n reserved bytes and wakes waiters that now fit.
func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.used.Add(-n)
	if b.nwait.Load() > 0 {
		b.mu.Lock()
		b.grantLocked()
		b.mu.Unlock()
	}
}

func (b *budget) grantLocked() {
	i := 0
	for ; i < len(b.waiters); i++ {
		w := b.waiters[i]
		if !b.cas(w.n) {
			break
		}
		w.done = true
		close(w.ready)
	}
	if i == 0 {
		return
	}
	b.nwait.Add(-int32(i))
	n := copy(b.waiters, b.waiters[i:])
	clear(b.waiters[n:])
	b.waiters = b.waiters[:n]
}

// setLimit changes the cap. Lowering it never takes back reservations;
// raising it wakes the waiters that now fit.
// Waiters that can no longer fit at all fail with ErrTooLarge.
func (b *budget) setLimit(limit int64) {
	b.mu.Lock()
	b.limit.Store(limit)
	kept := b.waiters[:0]
	for _, w := range b.waiters {
		if w.n > limit {
			w.done = true
			w.err = tooLarge(w.n, limit)
			close(w.ready)
			b.nwait.Add(-1)
			continue
		}
		kept = append(kept, w)
	}
	clear(b.waiters[len(kept):])
	b.waiters = kept
	b.grantLocked()
	b.mu.Unlock()
}

// close fails every waiter and every later slow-path acquire with ErrClosed.
func (b *budget) close() {
	b.mu.Lock()
	b.closed = true
	for _, w := range b.waiters {
		w.done = true
		w.err = ErrClosed
		close(w.ready)
	}
	b.nwait.Add(-int32(len(b.waiters)))
	clear(b.waiters)
	b.waiters = b.waiters[:0]
	b.mu.Unlock()
}

func tooLarge(n, limit int64) error {
	return fmt.Errorf("%w: %d bytes, TotalBatchMaxBytes %d; split the item or raise the cap", ErrTooLarge, n, limit)
}
