package batch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Result is the outcome of one item of a batch.
type Result[R any] struct {
	Value R
	Err   error
}

// FlushFunc sends one batch of key. It either writes the outcome of each
// item to results, one per item in the same order (len(results) ==
// len(items), all zero on entry), or returns a non-nil error, which every
// item of the batch receives. It must honour ctx (cancelled only when Close
// gives up) and must keep neither items nor results after it returns: the
// accumulator reuses both. Calls for different keys run concurrently; calls
// for one key at most MaxInflightPerKey at a time. It may add items for
// other keys, but an Add for its own key would wait for itself.
type FlushFunc[K comparable, T, R any] func(ctx context.Context, key K, items []T, results []Result[R]) error

// Accumulator batches items per key and flushes them with a FlushFunc. It is
// safe for concurrent use. See the package doc for when batches leave.
type Accumulator[K comparable, T, R any] struct {
	fn          FlushFunc[K, T, R]
	log         *zap.Logger
	metrics     *metrics
	cfg         Config // normalized; its Limits are the initial ones
	limits      atomic.Pointer[Limits]
	budget      *budget
	maxInflight int
	linger      bool
	failFast    bool
	epoch       time.Time

	mu     sync.RWMutex
	queues map[K]*queue[K, T, R]

	// outstanding counts accepted items whose outcome is not delivered yet.
	outstanding atomic.Int64
	closed      atomic.Bool
	closeOnce   sync.Once
	drainOnce   sync.Once
	drained     chan struct{}
	stop        chan struct{}
	tickerDone  chan struct{}
	limitsSet   chan struct{} // wakes the ticker to pick up a new MaxDelay
	wake        chan struct{} // wakes a relaxed ticker (see tickLoop)
	relaxed     atomic.Bool   // the ticker runs slow or sleeps: nothing lingers
	asleep      atomic.Bool   // the ticker sleeps; for tests

	flushCtx    context.Context
	cancelFlush context.CancelFunc

	entries sync.Pool
	batches sync.Pool
}

// New validates cfg, registers its metrics and starts the accumulator's
// ticker. Close releases it.
func New[K comparable, T, R any](cfg Config, fn FlushFunc[K, T, R]) (*Accumulator[K, T, R], error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil flush function", ErrInvalidConfig)
	}
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	a := &Accumulator[K, T, R]{
		fn:          fn,
		log:         cfg.Logger,
		cfg:         cfg,
		budget:      newBudget(cfg.TotalBatchMaxBytes),
		maxInflight: cfg.MaxInflightPerKey,
		linger:      cfg.Linger,
		failFast:    cfg.FailFast,
		epoch:       time.Now(),
		queues:      make(map[K]*queue[K, T, R]),
		drained:     make(chan struct{}),
		stop:        make(chan struct{}),
		tickerDone:  make(chan struct{}),
		limitsSet:   make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
	}
	lim := cfg.Limits
	a.limits.Store(&lim)
	a.metrics, err = newMetrics(cfg.Registerer, func() float64 { return float64(a.BufferedBytes()) })
	if err != nil {
		return nil, err
	}
	a.flushCtx, a.cancelFlush = context.WithCancel(context.Background()) //nolint:gosec // G118: kept in a field, Close calls it (the parent is Background, so nothing is held meanwhile)
	a.entries.New = func() any { return &entry[T, R]{done: make(chan struct{}, 1)} }
	a.batches.New = func() any { return &batch[K, T, R]{} }
	go a.tickLoop()
	return a, nil
}

// Add puts item (of size bytes) into key's buffer and waits for the outcome
// of its flush. It blocks while TotalBatchMaxBytes is reached (FailFast:
// returns ErrBufferFull). If the key is idle the flush runs at once on the
// calling goroutine, and Add returns when the flush function does (the flush
// function sees the accumulator's context; a flush that must honour callers'
// deadlines carries them in its items). When ctx ends while the item waits
// for room or in the buffer, the item is taken out, its bytes are given
// back and Add returns an error wrapping ErrNotSent and ctx's error; once
// the item is in flight, Add returns ctx's error and the item may still be
// delivered.
func (a *Accumulator[K, T, R]) Add(ctx context.Context, key K, item T, size int) (R, error) {
	var zero R
	e, q, err := a.enqueue(ctx, key, item, size, nil)
	if err != nil {
		return zero, err
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		q.mu.Lock()
		out := q.withdraw(e)
		q.mu.Unlock()
		if out {
			// Its buffer may still hold it (see queue.withdraw): it is
			// not reused.
			a.budget.release(e.size)
			a.complete(1)
			return zero, notSent("waiting in the buffer", ctx.Err())
		}
		select {
		case <-e.done:
		default:
			// The entry stays with the flusher; it is not reused.
			return zero, fmt.Errorf("batch: gave up waiting for the flush, which may deliver the item: %w", ctx.Err())
		}
	}
	res, err := e.res, e.err
	a.putEntry(e)
	return res, err
}

// AddAsync puts item (of size bytes) into key's buffer and returns once it
// is accepted. It blocks while TotalBatchMaxBytes is reached (FailFast:
// returns ErrBufferFull). On a nil return cb runs exactly once with the
// outcome, after the flush, never under a lock (see the package doc for the
// goroutine); on an error return cb never runs. When ctx ends while the item
// waits in the buffer, the item is taken out at once, its bytes are given
// back and cb gets an error wrapping ErrNotSent and ctx's error; once the
// item is in flight, its outcome is its batch's.
func (a *Accumulator[K, T, R]) AddAsync(ctx context.Context, key K, item T, size int, cb func(R, error)) error {
	if cb == nil {
		return ErrNilCallback
	}
	_, _, err := a.enqueue(ctx, key, item, size, cb)
	return err
}

// BufferedBytes returns the bytes reserved by accepted items that have not
// completed yet, buffered or in flight.
func (a *Accumulator[K, T, R]) BufferedBytes() int64 {
	return a.budget.used.Load()
}

// Reserve takes size bytes of TotalBatchMaxBytes for an item the caller
// sends without the accumulator (one that must go alone, say), so that the
// cap covers everything in flight. It blocks like Add while the bytes do
// not fit (FailFast: ErrBufferFull) and fails like Add for an item larger
// than the cap, after Close, or when ctx ends. On success it returns the
// function that gives the bytes back, to be called once the item is done;
// calls after the first do nothing.
func (a *Accumulator[K, T, R]) Reserve(ctx context.Context, size int) (release func(), err error) {
	n, err := a.admit(ctx, size)
	if err != nil {
		return nil, err
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			a.budget.release(n)
		}
	}, nil
}

// Limits returns the limits in force.
func (a *Accumulator[K, T, R]) Limits() Limits {
	return *a.limits.Load()
}

// SetLimits changes the limits while the accumulator runs (zero fields take
// their defaults). Items already buffered keep their reservation; batches
// built from now on use the new caps; a new MaxDelay applies from the next
// tick. Waiters that can no longer fit under a lowered TotalBatchMaxBytes
// fail with ErrTooLarge.
func (a *Accumulator[K, T, R]) SetLimits(l Limits) error {
	l = l.withDefaults()
	if err := l.validate(); err != nil {
		return err
	}
	a.limits.Store(&l)
	a.budget.setLimit(l.TotalBatchMaxBytes)
	select {
	case a.limitsSet <- struct{}{}:
	default:
	}
	return nil
}

func (a *Accumulator[K, T, R]) now() int64 { return int64(time.Since(a.epoch)) }

// admit validates an item of size bytes and reserves its bytes, waiting for
// them as the configuration says. On error nothing is reserved.
func (a *Accumulator[K, T, R]) admit(ctx context.Context, size int) (int64, error) {
	if size < 0 {
		return 0, fmt.Errorf("%w: %d", ErrInvalidSize, size)
	}
	if a.closed.Load() {
		return 0, ErrClosed
	}
	n := int64(size)
	if lim := a.limits.Load(); n > lim.TotalBatchMaxBytes {
		return 0, tooLarge(n, lim.TotalBatchMaxBytes)
	}
	if err := ctx.Err(); err != nil {
		return 0, notSent("", err)
	}
	if err := a.budget.acquire(ctx, n, a.failFast); err != nil {
		return 0, err
	}
	return n, nil
}

// enqueue validates, reserves, buffers and, when the policy says so, starts
// a flush: in place for a synchronous caller, on a new goroutine for an
// asynchronous one. It returns the entry and its queue.
func (a *Accumulator[K, T, R]) enqueue(ctx context.Context, key K, item T, size int, cb func(R, error)) (*entry[T, R], *queue[K, T, R], error) {
	n, err := a.admit(ctx, size)
	if err != nil {
		return nil, nil, err
	}
	a.outstanding.Add(1)
	e := a.entries.Get().(*entry[T, R])
	e.ctx, e.item, e.size, e.cb = ctx, item, n, cb

	q := a.lockQueue(key)
	if a.closed.Load() {
		q.mu.Unlock()
		a.budget.release(n)
		a.putEntry(e)
		a.complete(1)
		return nil, nil, ErrClosed
	}
	lim := a.limits.Load()
	now := a.now()
	e.at = now
	q.push(e)
	var b *batch[K, T, R]
	if r, ok := a.readyLocked(q, lim, now, false, false); ok {
		b = a.takeLocked(q, lim, r)
	}
	lingers := len(q.pending) > 0
	q.mu.Unlock()
	if lingers && a.relaxed.Load() {
		// Items wait now: the ticker must start them by MaxDelay.
		a.wakeTicker()
	}
	if b != nil {
		if cb == nil {
			a.runInline(b)
		} else {
			go a.run(b)
		}
	}
	return e, q, nil
}

// sweepLocked looks, at a tick, at the asynchronous entries of q's buffer
// whose context could end and nobody watches yet. An entry whose context has
// ended is withdrawn and returned, for its callback to run outside the lock.
// An entry that has waited a whole tick gets a watch on its context
// (context.AfterFunc) that withdraws it the moment the context ends; it is
// then not looked at again. So an asynchronous item whose context ends
// while it waits gets its outcome within one tick, at once when it has
// waited longer than a tick, while the items that leave within a tick (all
// of them while requests are quick) cost one look each and no watch.
// Synchronous callers withdraw their own entries (see Add).
func (a *Accumulator[K, T, R]) sweepLocked(q *queue[K, T, R], lim *Limits, now int64, ended []*entry[T, R]) []*entry[T, R] {
	settled := true // every entry so far is in pending[:watched]
	old := now - int64(lim.tick())
	start := len(ended)
	for i := q.watched; i < len(q.pending); i++ {
		e := q.pending[i]
		switch {
		case e.state == withdrawn || e.cb == nil || e.ctx.Done() == nil:
		case e.ctx.Err() != nil:
			ended = append(ended, e)
		case e.at <= old:
			a.watch(q, e)
		default:
			settled = false
		}
		if settled {
			q.watched = i + 1
		}
	}
	for _, e := range ended[start:] {
		q.withdraw(e)
	}
	return ended
}

// watch arranges for e, an asynchronous entry waiting in q's buffer, to be
// withdrawn as soon as its context ends: its callback then comes at once,
// not when the batches ahead of it are done, and its bytes are given back.
// Called with q.mu held; take cancels the watch when the entry leaves the
// buffer.
func (a *Accumulator[K, T, R]) watch(q *queue[K, T, R], e *entry[T, R]) {
	e.stop = context.AfterFunc(e.ctx, func() {
		q.mu.Lock()
		out := q.withdraw(e)
		q.mu.Unlock()
		if out {
			a.finishWithdrawn([]*entry[T, R]{e})
		}
	})
}

// finishWithdrawn gives back the bytes of withdrawn asynchronous entries and
// runs their callbacks, in order.
func (a *Accumulator[K, T, R]) finishWithdrawn(es []*entry[T, R]) {
	for _, e := range es {
		a.budget.release(e.size)
	}
	var zero R
	for _, e := range es {
		e.cb(zero, notSent("waiting in the buffer", e.ctx.Err()))
	}
	a.complete(len(es))
}

// notSent is the error of an item whose context ended before the item
// reached the flush function; where says where it was waiting.
func notSent(where string, err error) error {
	if where == "" {
		return fmt.Errorf("batch: %w: %w", ErrNotSent, err)
	}
	return fmt.Errorf("batch: %w (%s): %w", ErrNotSent, where, err)
}

// lockQueue returns key's queue, locked, creating it if needed.
func (a *Accumulator[K, T, R]) lockQueue(key K) *queue[K, T, R] {
	for {
		a.mu.RLock()
		q := a.queues[key]
		a.mu.RUnlock()
		if q == nil {
			a.mu.Lock()
			created := false
			if q = a.queues[key]; q == nil {
				q = &queue[K, T, R]{key: key}
				a.queues[key] = q
				created = true
			}
			a.mu.Unlock()
			if created {
				// A sleeping ticker must come back to drop the key's
				// state once it is idle.
				a.wakeTicker()
			}
		}
		q.mu.Lock()
		if !q.dead {
			return q
		}
		q.mu.Unlock()
	}
}

func (a *Accumulator[K, T, R]) wakeTicker() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// readyLocked applies the policy of the package doc: may q start a batch now,
// and why. completed says a flush of q just finished. The oldest item must
// leave at MaxDelay; the ticker starts it half a period early so that its
// next run is not too late.
func (a *Accumulator[K, T, R]) readyLocked(q *queue[K, T, R], lim *Limits, now int64, completed, fromTicker bool) (reason, bool) {
	if len(q.pending) == 0 || q.inflight >= a.maxInflight {
		return 0, false
	}
	if a.closed.Load() {
		return reasonClose, true
	}
	if q.full(lim) {
		return reasonFull, true
	}
	if !a.linger && (q.inflight == 0 || completed) {
		return reasonIdle, true
	}
	hold := int64(lim.MaxDelay)
	if fromTicker {
		hold -= int64(lim.tick())
	}
	if now-q.pending[0].at >= hold {
		return reasonTimer, true
	}
	return 0, false
}

func (a *Accumulator[K, T, R]) takeLocked(q *queue[K, T, R], lim *Limits, r reason) *batch[K, T, R] {
	b := a.batches.Get().(*batch[K, T, R])
	b.q, b.reason = q, r
	q.take(b, lim)
	return b
}

// Close stops accepting items, flushes everything buffered and waits until
// every accepted item has its outcome. If ctx ends first it cancels the
// running flushes, fails the batches not started with ErrClosed and returns
// ctx's error. Calling Close again waits again.
func (a *Accumulator[K, T, R]) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		a.closed.Store(true)
		a.budget.close()
		close(a.stop)
		<-a.tickerDone
		a.kickAll()
		if a.outstanding.Load() == 0 {
			a.drainOnce.Do(func() { close(a.drained) })
		}
	})
	var err error
	select {
	case <-a.drained:
		a.cancelFlush() // every flush has returned: release the context too
	case <-ctx.Done():
		a.cancelFlush()
		err = fmt.Errorf("batch: close: %w", ctx.Err())
	}
	a.unregister()
	return err
}

func (a *Accumulator[K, T, R]) unregister() {
	if a.metrics != nil {
		a.metrics.set.Unregister()
	}
}

// complete records that n accepted items got their outcome.
func (a *Accumulator[K, T, R]) complete(n int) {
	if a.outstanding.Add(-int64(n)) == 0 && a.closed.Load() {
		a.drainOnce.Do(func() { close(a.drained) })
	}
}

func (a *Accumulator[K, T, R]) putEntry(e *entry[T, R]) {
	if e.keep {
		return
	}
	var zeroT T
	var zeroR R
	e.ctx, e.item, e.cb, e.res, e.err = nil, zeroT, nil, zeroR, nil
	e.state = queued
	a.entries.Put(e)
}
