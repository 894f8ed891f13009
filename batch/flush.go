package batch

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"go.uber.org/zap"
)

// runInline flushes b on a synchronous caller's goroutine. What became ready
// meanwhile continues on a new goroutine, and so do the callbacks of b's
// asynchronous items: the caller returns as soon as its own batch is done.
func (a *Accumulator[K, T, R]) runInline(b *batch[K, T, R]) {
	q := b.q
	sent := a.execute(b)
	a.signalSync(b)
	if next := a.afterFlush(q, sent); next != nil {
		go a.run(next)
	}
	if b.async > 0 {
		go a.finish(b)
		return
	}
	a.finish(b)
}

// run flushes b and then, on the same goroutine, whatever the completion
// made ready for the same key.
func (a *Accumulator[K, T, R]) run(b *batch[K, T, R]) {
	for b != nil {
		q := b.q
		sent := a.execute(b)
		if a.signalSync(b) > 1 {
			// The callers just signalled are runnable but not running. Let
			// them run to their next Add before the next batch is cut, so
			// they join it rather than forming a second group that always
			// waits one flush behind this one. Measured with 16 and 64
			// synchronous senders on one key, this nearly doubles the batch
			// size and the throughput (see BenchmarkSyncSend).
			runtime.Gosched()
		}
		next := a.afterFlush(q, sent)
		if b.async > 0 && next != nil {
			// Callbacks may block or add to this key; they must not hold up
			// the key's next batch.
			go a.run(next)
			next = nil
		}
		a.finish(b)
		b = next
	}
}

// execute calls the flush function for b's entries and records every
// outcome in its entry, skipped entries included, then releases the batch's
// bytes. It reports whether a flush ran (and so holds a slot of the key).
// Nobody is told yet: see signalSync and finish.
func (a *Accumulator[K, T, R]) execute(b *batch[K, T, R]) (sent bool) {
	for _, e := range b.skipped {
		e.err = notSent("waiting in the buffer", e.ctx.Err())
	}
	if len(b.entries) > 0 {
		sent = true
		results := slices.Grow(b.results[:0], len(b.items))[:len(b.items)]
		b.results = results
		var err error
		if a.flushCtx.Err() != nil {
			err = fmt.Errorf("%w: Close gave up before this batch was sent", ErrClosed)
		} else {
			err = a.fn(a.flushCtx, b.q.key, b.items, results)
		}
		if err != nil {
			a.log.Debug("batch flush failed", zap.Int("items", len(b.entries)), zap.Error(err))
		}
		a.metrics.observe(b.reason, len(b.entries), b.bytes)
		for i, e := range b.entries {
			if err != nil {
				e.err = err
			} else {
				e.res, e.err = results[i].Value, results[i].Err
			}
		}
	}
	// Release before anyone is told, so that senders blocked on the cap and
	// the callers about to be woken find room.
	a.budget.release(b.bytes + b.skippedBytes)
	return sent
}

// signalSync wakes the synchronous callers of b. An entry is not touched
// after its caller is signalled, as the caller recycles it: its slot in b is
// cleared first.
func (a *Accumulator[K, T, R]) signalSync(b *batch[K, T, R]) int {
	n := 0
	for _, list := range [2][]*entry[T, R]{b.skipped, b.entries} {
		for i, e := range list {
			if e.cb == nil {
				list[i] = nil
				e.done <- struct{}{}
				n++
			}
		}
	}
	return n
}

// finish runs the callbacks of b's asynchronous entries in item order
// (skipped entries first), then counts b's items as completed and recycles
// b.
func (a *Accumulator[K, T, R]) finish(b *batch[K, T, R]) {
	if b.async > 0 {
		for _, list := range [2][]*entry[T, R]{b.skipped, b.entries} {
			for _, e := range list {
				if e == nil {
					continue
				}
				if cb := e.cb; cb != nil {
					r, err := e.res, e.err
					a.putEntry(e)
					cb(r, err)
				}
			}
		}
	}
	n := len(b.skipped) + len(b.entries)
	a.putBatch(b)
	a.complete(n)
}

// afterFlush frees q's slot when a flush ran and takes what is now ready:
// the first batch is returned for the caller to run, any further ones (when
// several slots are free) start on their own goroutines.
func (a *Accumulator[K, T, R]) afterFlush(q *queue[K, T, R], sent bool) *batch[K, T, R] {
	var first *batch[K, T, R]
	var extra []*batch[K, T, R]
	lim := a.limits.Load()
	q.mu.Lock()
	if sent {
		q.inflight--
	}
	now := a.now()
	for {
		r, ok := a.readyLocked(q, lim, now, sent, false)
		if !ok {
			break
		}
		b := a.takeLocked(q, lim, r)
		if first == nil {
			first = b
		} else {
			extra = append(extra, b)
		}
	}
	q.mu.Unlock()
	for _, b := range extra {
		go a.run(b)
	}
	return first
}

func (a *Accumulator[K, T, R]) putBatch(b *batch[K, T, R]) {
	clear(b.entries)
	clear(b.items)
	clear(b.results)
	clear(b.skipped)
	b.entries, b.items, b.results, b.skipped = b.entries[:0], b.items[:0], b.results[:0], b.skipped[:0]
	b.q, b.bytes, b.skippedBytes, b.async = nil, 0, 0, 0
	a.batches.Put(b)
}

// tickLoop is the accumulator's one background goroutine. It ticks every
// MaxDelay/2 while items may linger in a buffer; once a tick finds none, it
// relaxes to one tick per idleTick (all that dropping idle keys needs) and
// sleeps once no key has state. An item left waiting in a buffer (its key
// busy) wakes it back to the fast pace, as does a new key.
// A producer whose sends all leave at once (one synchronous sender, a
// light load) thus costs no wake-ups every MaxDelay/2.
func (a *Accumulator[K, T, R]) tickLoop() {
	defer close(a.tickerDone)
	d := a.limits.Load().tick()
	t := time.NewTicker(d)
	defer t.Stop()
	period := d // 0 while asleep
	setPeriod := func(p time.Duration) {
		switch p {
		case period:
		case 0:
			t.Stop()
		default:
			t.Reset(p)
		}
		period = p
		a.asleep.Store(p == 0)
	}
	// hurry returns to the fast pace: items wait, or may.
	hurry := func() {
		a.relaxed.Store(false)
		setPeriod(d)
	}
	var qs []*queue[K, T, R]
	for {
		var tc <-chan time.Time
		if period != 0 {
			tc = t.C
		}
		select {
		case <-a.stop:
			return
		case <-a.limitsSet:
			if nd := a.limits.Load().tick(); nd != d {
				d = nd
				if !a.relaxed.Load() {
					setPeriod(d)
				}
			}
		case <-a.wake:
			hurry()
		case <-tc:
			var lingering bool
			qs, lingering = a.tick(qs)
			if lingering {
				hurry()
				continue
			}
			// Relax, then look again: an Add that left an item waiting
			// before it could see the flag wakes nobody, so this pass
			// must see its item.
			a.relaxed.Store(true)
			if a.lingering() {
				hurry()
				continue
			}
			if a.keys() == 0 {
				setPeriod(0)
			} else {
				setPeriod(max(d, idleTick))
			}
		}
	}
}

// keys returns how many keys have state.
func (a *Accumulator[K, T, R]) keys() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.queues)
}

// lingering reports whether any key has items waiting in its buffer.
func (a *Accumulator[K, T, R]) lingering() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, q := range a.queues {
		q.mu.Lock()
		n := len(q.pending)
		q.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// idleSpan is how long a key stays unused and empty before its state is
// dropped; idleTick is the pace of a relaxed ticker, which only drops
// such keys.
const (
	idleSpan = time.Second
	idleTick = idleSpan / 4
)

// tick starts the batches that would be too old by the next tick and drops
// the state of keys idle for idleSpan. It reports whether items still wait
// in a buffer. qs is scratch space, returned for reuse.
func (a *Accumulator[K, T, R]) tick(qs []*queue[K, T, R]) ([]*queue[K, T, R], bool) {
	qs = a.snapshot(qs)
	lim := a.limits.Load()
	now := a.now()
	lingering := false
	var (
		stale []*queue[K, T, R]
		ended []*entry[T, R]
	)
	for _, q := range qs {
		q.mu.Lock()
		bs := a.takeReadyLocked(q, lim, now, true)
		ended = a.sweepLocked(q, lim, now, ended)
		switch {
		case q.used:
			q.used, q.idleFrom = false, 0
		case len(q.pending) == 0 && q.inflight == 0:
			if q.idleFrom == 0 {
				q.idleFrom = now
			} else if now-q.idleFrom >= int64(idleSpan) {
				stale = append(stale, q)
			}
		}
		lingering = lingering || len(q.pending) > 0
		q.mu.Unlock()
		a.startAll(bs)
	}
	if len(ended) > 0 {
		// Callbacks may block: not on the ticker.
		go a.finishWithdrawn(ended)
	}
	if len(stale) > 0 {
		a.mu.Lock()
		for _, q := range stale {
			q.mu.Lock()
			if !q.used && len(q.pending) == 0 && q.inflight == 0 {
				delete(a.queues, q.key)
				q.dead = true
			}
			q.mu.Unlock()
		}
		a.mu.Unlock()
	}
	clear(qs)
	return qs[:0], lingering
}

// kickAll starts, for every key, what may start now; after Close that is
// everything a free slot allows.
func (a *Accumulator[K, T, R]) kickAll() {
	qs := a.snapshot(nil)
	lim := a.limits.Load()
	now := a.now()
	for _, q := range qs {
		q.mu.Lock()
		bs := a.takeReadyLocked(q, lim, now, true)
		q.mu.Unlock()
		a.startAll(bs)
	}
}

func (a *Accumulator[K, T, R]) snapshot(qs []*queue[K, T, R]) []*queue[K, T, R] {
	a.mu.RLock()
	for _, q := range a.queues {
		qs = append(qs, q)
	}
	a.mu.RUnlock()
	return qs
}

// takeReadyLocked takes every batch q may start now, chained through a
// slice that startAll consumes.
func (a *Accumulator[K, T, R]) takeReadyLocked(q *queue[K, T, R], lim *Limits, now int64, fromTicker bool) []*batch[K, T, R] {
	var bs []*batch[K, T, R]
	for {
		r, ok := a.readyLocked(q, lim, now, false, fromTicker)
		if !ok {
			return bs
		}
		bs = append(bs, a.takeLocked(q, lim, r))
	}
}

func (a *Accumulator[K, T, R]) startAll(bs []*batch[K, T, R]) {
	for _, b := range bs {
		go a.run(b)
	}
}
