package consumer

import (
	"context"
	"sync"
)

// limiter is a counting semaphore whose limit can change while it is held
// (a live concurrency change). Lowering the limit never interrupts holders:
// new acquisitions wait until the count drops under the new limit.
type limiter struct {
	mu    sync.Mutex
	limit int
	used  int
	// changed is closed on the next release or resize and then dropped; it
	// is made only when someone waits, so a release nobody waits for (the
	// common case, once per message) allocates nothing.
	changed chan struct{}
}

func newLimiter(limit int) *limiter {
	return &limiter{limit: max(limit, 1)}
}

// setLimit changes the limit (at least 1) and wakes waiters.
func (l *limiter) setLimit(n int) {
	l.mu.Lock()
	l.limit = max(n, 1)
	l.wakeLocked()
	l.mu.Unlock()
}

func (l *limiter) wakeLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// waitChanLocked is the channel the next release or resize closes.
func (l *limiter) waitChanLocked() <-chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// acquire takes one unit, waiting while the limiter is full.
func (l *limiter) acquire(ctx context.Context) error {
	_, err := l.acquireUpTo(ctx, 1)
	return err
}

// acquireUpTo waits until at least one unit is free, then takes as many as
// are free, up to n, and returns how many it took.
func (l *limiter) acquireUpTo(ctx context.Context, n int) (int, error) {
	for {
		l.mu.Lock()
		if free := l.limit - l.used; free > 0 {
			k := min(free, n)
			l.used += k
			l.mu.Unlock()
			return k, nil
		}
		ch := l.waitChanLocked()
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-ch:
		}
	}
}

// waitFree waits until at least one unit is free and returns how many are,
// without taking any. With take it lets a receive size its batch without
// holding units during a long poll: several brokers' receives run at once,
// so the limit can be exceeded by what they bring back together (at most
// one batch per broker), and that bound is what the consumer documents.
func (l *limiter) waitFree(ctx context.Context) (int, error) {
	for {
		l.mu.Lock()
		if free := l.limit - l.used; free > 0 {
			l.mu.Unlock()
			return free, nil
		}
		ch := l.waitChanLocked()
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-ch:
		}
	}
}

// take counts n units as held, even beyond the limit.
func (l *limiter) take(n int) {
	l.mu.Lock()
	l.used += n
	l.mu.Unlock()
}

// release returns n units.
func (l *limiter) release(n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	l.used -= n
	l.wakeLocked()
	l.mu.Unlock()
}

// inUse is the number of units held.
func (l *limiter) inUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}
