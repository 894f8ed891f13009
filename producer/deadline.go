package producer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Deadlines without a timer per send.
//
// A send whose context has no deadline is bounded by timeouts.sendDeadline.
// context.WithTimeout would give every such send a timer of its own, armed
// and stopped again within a millisecond: on the batched path that was a
// third of the CPU a synchronous sender spends outside the request. Sends
// whose context can never end (context.Background and values over it, the
// common case) instead share the Done channel of a coarse instant: all
// deadlines within one deadlineGrain end on one channel, closed by one
// timer. Such a send ends at most deadlineGrain after its deadline.

// deadlineGrain is the resolution of shared deadlines.
const deadlineGrain = 10 * time.Millisecond

// deadlineSlot is one coarse instant and the channel closed at it.
//
// Every waiting sender queues on its Done channel's lock, so one channel
// for all of them would be a point of contention: a slot has
// deadlineShards channels, all closed together, and a send takes one by a
// key of its own.
type deadlineSlot struct {
	at   int64 // unix nanoseconds, a multiple of deadlineGrain
	done [deadlineShards]chan struct{}
}

const deadlineShards = 8

// deadlines hands out shared Done channels. Deadlines of concurrent sends
// grow with time, so the last two slots serve nearly every request.
type deadlines struct {
	cur, prev atomic.Pointer[deadlineSlot]
	mu        sync.Mutex
}

// at returns a channel closed at the first grain boundary at or after d;
// key spreads concurrent sends over the slot's channels.
func (ds *deadlines) at(d time.Time, key uint64) <-chan struct{} {
	g := int64(deadlineGrain)
	at := (d.UnixNano() + g - 1) / g * g
	shard := key % deadlineShards
	if s := ds.cur.Load(); s != nil && s.at == at {
		return s.done[shard]
	}
	if s := ds.prev.Load(); s != nil && s.at == at {
		return s.done[shard]
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if s := ds.cur.Load(); s != nil && s.at == at {
		return s.done[shard]
	}
	s := &deadlineSlot{at: at}
	for i := range s.done {
		s.done[i] = make(chan struct{})
	}
	time.AfterFunc(time.Until(time.Unix(0, at)), func() {
		for _, c := range s.done {
			close(c)
		}
	})
	ds.prev.Store(ds.cur.Load())
	ds.cur.Store(s)
	return s.done[shard]
}

// sendCtx is the context of a send bounded by sendDeadline whose caller's
// context can never end. It is embedded in the send's pending state, so it
// costs no allocation either.
//
// Contexts derived from it would each need a goroutine (the context package
// cannot hook into a foreign Done channel), so code that derives one uses
// detach first.
type sendCtx struct {
	context.Context // the caller's; its Done is nil
	deadline        time.Time
	done            <-chan struct{}
}

func (c *sendCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *sendCtx) Done() <-chan struct{}       { return c.done }

func (c *sendCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// sendContext bounds ctx by d from now for one send: ctx itself when it has
// a deadline, a sendCtx in pd when it can never end, else a context with a
// timer of its own.
func (p *Producer) sendContext(ctx context.Context, pd *pending, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	if ctx.Done() != nil {
		return context.WithTimeout(ctx, d)
	}
	dl := pd.start.Add(d)
	// The address of pd differs between concurrent sends; its low bits
	// are alignment.
	key := uint64(uintptr(unsafe.Pointer(pd)) >> 7) //nolint:gosec // G103: the address is only hashed to spread timers, never turned back into a pointer
	pd.sctx = sendCtx{Context: ctx, deadline: dl, done: p.deadlines.at(dl, key)}
	return &pd.sctx, func() {}
}

// detach returns a context that a child context may be derived from
// cheaply, and the time left of ctx's deadline: for a sendCtx its caller's
// context (which never ends) and its deadline, else ctx itself.
func detach(ctx context.Context, timeout time.Duration) (context.Context, time.Duration) {
	if sc, ok := ctx.(*sendCtx); ok {
		return sc.Context, min(timeout, time.Until(sc.deadline))
	}
	return ctx, timeout
}
