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
	at    int64 // unix nanoseconds, a multiple of deadlineGrain
	done  [deadlineShards]chan struct{}
	hooks [deadlineShards]hooks // run after the channel of their shard closes
}

// hooks are the functions registered with sendCtx.AfterFunc on the sends of
// one shard of a slot, run when the slot's instant passes. They are a
// doubly linked list, so that a send leaving before its deadline takes its
// function out in constant time.
type hooks struct {
	mu    sync.Mutex
	fired bool
	head  *hook
}

type hook struct {
	f          func()
	prev, next *hook
	linked     bool
}

// add registers f, or runs it at once (on a goroutine of its own) when the
// instant has passed. stop takes f out and reports whether it did so
// before f started.
func (h *hooks) add(f func()) (stop func() bool) {
	h.mu.Lock()
	if h.fired {
		h.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	n := &hook{f: f, next: h.head, linked: true}
	if h.head != nil {
		h.head.prev = n
	}
	h.head = n
	h.mu.Unlock()
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !n.linked {
			return false
		}
		if n.prev != nil {
			n.prev.next = n.next
		} else {
			h.head = n.next
		}
		if n.next != nil {
			n.next.prev = n.prev
		}
		n.linked, n.prev, n.next = false, nil, nil
		return true
	}
}

// fire runs the registered functions, once the instant has passed.
func (h *hooks) fire() {
	h.mu.Lock()
	h.fired = true
	n := h.head
	h.head = nil
	for m := n; m != nil; m = m.next {
		m.linked = false
	}
	h.mu.Unlock()
	for ; n != nil; n = n.next {
		n.f()
	}
}

const deadlineShards = 8

// deadlines hands out shared Done channels. Deadlines of concurrent sends
// grow with time, so the last two slots serve nearly every request.
type deadlines struct {
	cur, prev atomic.Pointer[deadlineSlot]
	mu        sync.Mutex
}

// at returns the slot of the first grain boundary at or after d, and the
// shard of it a send takes; key spreads concurrent sends over the shards.
func (ds *deadlines) at(d time.Time, key uint64) (*deadlineSlot, uint8) {
	g := int64(deadlineGrain)
	at := (d.UnixNano() + g - 1) / g * g
	shard := uint8(key % deadlineShards)
	if s := ds.cur.Load(); s != nil && s.at == at {
		return s, shard
	}
	if s := ds.prev.Load(); s != nil && s.at == at {
		return s, shard
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if s := ds.cur.Load(); s != nil && s.at == at {
		return s, shard
	}
	s := &deadlineSlot{at: at}
	for i := range s.done {
		s.done[i] = make(chan struct{})
	}
	time.AfterFunc(time.Until(time.Unix(0, at)), func() {
		for i, c := range s.done {
			close(c)
			s.hooks[i].fire()
		}
	})
	ds.prev.Store(ds.cur.Load())
	ds.cur.Store(s)
	return s, shard
}

// sendCtx is the context of a send bounded by sendDeadline whose caller's
// context can never end. It is embedded in the send's pending state, so it
// costs no allocation either.
//
// It has the AfterFunc method the context package looks for, so that
// context.AfterFunc on it (the accumulator watching a message that waits
// in a buffer) and contexts derived from it hook into its slot instead of
// starting a goroutine each to wait on a foreign Done channel. Deriving a
// context costs a registration all the same: code that derives one for a
// request uses detach first.
type sendCtx struct {
	context.Context // the caller's; its Done is nil
	deadline        time.Time
	done            <-chan struct{}
	slot            *deadlineSlot
	shard           uint8
}

func (c *sendCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *sendCtx) Done() <-chan struct{}       { return c.done }

// AfterFunc runs f once the send's deadline has passed, as context.AfterFunc
// would. f runs on the goroutine of the slot's timer, after every channel
// of the slot is closed: the functions the context package passes only
// cancel a context, which is quick.
func (c *sendCtx) AfterFunc(f func()) (stop func() bool) {
	return c.slot.hooks[c.shard].add(f)
}

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
	slot, shard := p.deadlines.at(dl, key)
	pd.sctx = sendCtx{Context: ctx, deadline: dl, done: slot.done[shard], slot: slot, shard: shard}
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
