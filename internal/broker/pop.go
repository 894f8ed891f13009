package broker

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/store"
)

// inflight is one message handed to a consumer (or, for a message with a
// future delivery time, waiting for it) and not yet acked.
type inflight struct {
	offset int64
	// attempts counts deliveries so far; 0 while a delayed message waits.
	attempts int32
	// deadline is when the message becomes visible again (unix ms).
	deadline int64
	nonce    uint64
	popTime  int64
	// autoRenew: the broker extends the deadline while the client lives, as
	// the proxy does for receives with auto_renew (push consumers).
	autoRenew bool
	renewFrom int64
	client    string
	idx       int // position in queueState.due; -1 when not in it
}

// dueHeap orders in-flight messages by deadline.
type dueHeap []*inflight

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].deadline != h[j].deadline {
		return h[i].deadline < h[j].deadline
	}
	return h[i].offset < h[j].offset
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *dueHeap) Push(x any) {
	e := x.(*inflight)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

// queueState is a group's progress on one queue. Every offset below
// committed is done; every offset in [committed, next) is either in flight
// or in acked (acked ahead of an older message still in flight); offsets from
// next on have never been delivered to the group.
type queueState struct {
	committed int64
	next      int64
	inflight  map[int64]*inflight
	acked     map[int64]struct{}
	due       dueHeap
}

func newQueueState(start int64) *queueState {
	return &queueState{committed: start, next: start, inflight: map[int64]*inflight{}, acked: map[int64]struct{}{}}
}

func (q *queueState) track(e *inflight) {
	q.inflight[e.offset] = e
	heap.Push(&q.due, e)
}

// markDone records that offset needs no further delivery (acked, filtered
// out, dead-lettered or gone from the store) and advances committed.
func (q *queueState) markDone(off int64) {
	if e, ok := q.inflight[off]; ok {
		if e.idx >= 0 {
			heap.Remove(&q.due, e.idx)
		}
		delete(q.inflight, off)
	}
	if off < q.committed || off >= q.next {
		return
	}
	q.acked[off] = struct{}{}
	q.advance()
}

// advance moves committed over the offsets acked ahead of it.
func (q *queueState) advance() {
	for q.committed < q.next {
		if _, ok := q.acked[q.committed]; !ok {
			return
		}
		delete(q.acked, q.committed)
		q.committed++
	}
}

// skipTo drops every offset below min: the store no longer has them.
func (q *queueState) skipTo(min int64) {
	if q.committed >= min {
		return
	}
	for off := range q.inflight {
		if off < min {
			q.markDone(off)
		}
	}
	for off := range q.acked {
		if off < min {
			delete(q.acked, off)
		}
	}
	q.committed = min
	if q.next < min {
		q.next = min
	}
	q.advance()
}

// lockedFIFO reports whether a FIFO queue still has a message in flight
// (invisible), which holds back everything after it, and until when (the
// latest deadline; an ack may free it sooner).
func (q *queueState) lockedFIFO(now int64) (bool, int64) {
	var until int64
	for _, e := range q.inflight {
		if e.deadline > now && e.deadline > until {
			until = e.deadline
		}
	}
	return until > 0, until
}

// wakeAt is when the queue may have something deliverable again, judged
// from its in-flight messages alone (0: never, new messages aside).
func (q *queueState) wakeAt(now int64, fifo bool) int64 {
	if fifo {
		if locked, until := q.lockedFIFO(now); locked {
			return until
		}
	}
	if len(q.due) > 0 {
		return q.due[0].deadline
	}
	return 0
}

// groupTopic is the state of one consumer group on one topic of this
// broker. Its mutex serializes pops, acks and changes on the topic for the
// group, so two receives never get the same message.
type groupTopic struct {
	group, topic string

	mu        sync.Mutex
	queues    map[int32]*queueState
	rr        int
	autoRenew int  // number of in-flight entries with autoRenew
	dirty     bool // a pop changed the state (set and cleared under mu)
	// changed is closed (and replaced) when in-flight state changes in a way
	// that can make messages deliverable sooner; long polls wait on it.
	changed chan struct{}
}

func newGroupTopic(group, topic string) *groupTopic {
	return &groupTopic{group: group, topic: topic, queues: map[int32]*queueState{}, changed: make(chan struct{})}
}

// deadLetters reports whether the group moves messages of this topic that
// used up their attempts to its dead-letter topic. Not when the topic is
// that dead-letter topic: a copy there carries more attempts than the
// group allows, and each pop would append it again to the very topic it
// reads, for ever. A group reading its own dead-letter topic gets every
// message, however many attempts it carries, and redeliveries go on.
func (g *groupTopic) deadLetters() bool { return g.topic != DLQTopic(g.group) }

func (g *groupTopic) signalLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *groupTopic) changedChan() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// popOptions are the parameters of one pop.
type popOptions struct {
	queues      []int32
	max         int
	invisible   time.Duration
	filter      tagFilter
	fifo        bool
	maxAttempts int32
	autoRenew   bool
	client      string
	now         time.Time
}

// popped is one message delivered by a pop.
type popped struct {
	// msg points into the slice a store read returned; nothing else holds
	// that slice, so it is not copied.
	msg      *store.StoredMessage
	attempts int32
	handle   receipt
}

// maxScanPerPop bounds the entries one pop reads from a queue (filtered-out
// and delayed messages included), so one receive never holds the lock long.
const maxScanPerPop = 1024

// pop delivers up to opts.max messages from the queues, oldest due
// redeliveries first, then new messages. It returns the delivered messages
// and the earliest deadline of a message still in flight (0 if none), which
// is when a long poll should look again.
func (b *Broker) pop(ctx context.Context, g *groupTopic, opts popOptions) ([]popped, int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := opts.now.UnixMilli()
	out := make([]popped, 0, opts.max)
	moreToScan := false
	n := len(opts.queues)
	start := g.rr
	g.rr++
	for i := 0; i < n && len(out) < opts.max; i++ {
		qid := opts.queues[(start+i)%n]
		qs, err := b.queueStateLocked(g, qid)
		if err != nil {
			return out, 0, err
		}
		if opts.fifo {
			if locked, _ := qs.lockedFIFO(now); locked {
				continue
			}
		}
		out, err = b.redeliverLocked(ctx, g, qid, qs, opts, out)
		if err != nil {
			return out, 0, err
		}
		var more bool
		out, more, err = b.popNewLocked(ctx, g, qid, qs, opts, out)
		if err != nil {
			return out, 0, err
		}
		moreToScan = moreToScan || more
	}
	var nextDue int64
	for _, qid := range opts.queues {
		if qs := g.queues[qid]; qs != nil {
			if d := qs.wakeAt(now, opts.fifo); d > 0 && (nextDue == 0 || d < nextDue) {
				nextDue = d
			}
		}
	}
	if moreToScan && len(out) == 0 {
		// The scan stopped at its bound with entries left (all filtered out
		// or delayed so far): look again at once, not at the next arrival.
		nextDue = now
	}
	if g.dirty || len(out) > 0 {
		g.dirty = false
		b.progressChanged()
	}
	return out, nextDue, nil
}

// queueStateLocked returns the group's state of a queue, starting a new one
// at the queue's first stored offset: a new group consumes what the broker
// still holds, as RocketMQ's pop does while those messages are in memory.
func (b *Broker) queueStateLocked(g *groupTopic, qid int32) (*queueState, error) {
	if qs := g.queues[qid]; qs != nil {
		return qs, nil
	}
	min, _ := b.store.Offsets(g.topic, qid)
	qs := newQueueState(min)
	g.queues[qid] = qs
	return qs, nil
}

func (b *Broker) readOne(ctx context.Context, topic string, qid int32, off int64) (*store.StoredMessage, error) {
	msgs, err := b.store.Read(ctx, topic, qid, off, 1, b.cfg.Limits.MaxBodySize*2)
	if err != nil {
		return nil, err
	}
	for i := range msgs {
		if msgs[i].QueueOffset == off {
			return &msgs[i], nil
		}
	}
	return nil, fmt.Errorf("%w: offset %d of %s/%d not returned", store.ErrOffsetOutOfRange, off, topic, qid)
}

func (b *Broker) redeliverLocked(ctx context.Context, g *groupTopic, qid int32, qs *queueState, opts popOptions, out []popped) ([]popped, error) {
	now := opts.now.UnixMilli()
	var due []*inflight
	for len(qs.due) > 0 && qs.due[0].deadline <= now && (opts.fifo || len(out)+len(due) < opts.max) {
		due = append(due, heap.Pop(&qs.due).(*inflight))
	}
	if len(due) > 0 {
		g.dirty = true
	}
	if opts.fifo {
		// An orderly queue redelivers strictly by offset; the pop took every
		// due entry so that none is skipped over.
		sort.Slice(due, func(i, j int) bool { return due[i].offset < due[j].offset })
	}
	for i, e := range due {
		if len(out) >= opts.max {
			b.requeue(qs, due[i:])
			break
		}
		m, err := b.readOne(ctx, g.topic, qid, e.offset)
		if errors.Is(err, store.ErrOffsetOutOfRange) {
			qs.markDone(e.offset)
			continue
		}
		if err != nil {
			b.requeue(qs, due[i:])
			return out, err
		}
		if !opts.filter.match(m.Tag) {
			qs.markDone(e.offset)
			continue
		}
		if made := carried(m) + e.attempts; made >= opts.maxAttempts && g.deadLetters() {
			// The delivery this pop would make is one too many: the
			// dead-letter copy counts it, as the proxy's does.
			if err := b.deadLetter(ctx, g.group, m, made+1); err != nil {
				b.requeue(qs, due[i:])
				return out, err
			}
			qs.markDone(e.offset)
			continue
		}
		out = append(out, b.deliverLocked(g, qid, qs, e, m, opts))
	}
	return out, nil
}

// requeue puts back due entries a failed redelivery did not get to.
func (b *Broker) requeue(qs *queueState, rest []*inflight) {
	for _, e := range rest {
		if _, ok := qs.inflight[e.offset]; ok && e.idx < 0 {
			heap.Push(&qs.due, e)
		}
	}
}

// popNewLocked delivers messages never delivered to the group. more reports
// that it stopped at maxScanPerPop with entries left to look at.
func (b *Broker) popNewLocked(ctx context.Context, g *groupTopic, qid int32, qs *queueState, opts popOptions, out []popped) (_ []popped, more bool, _ error) {
	now := opts.now.UnixMilli()
	scanned := 0
	for len(out) < opts.max {
		_, max := b.store.Offsets(g.topic, qid)
		if qs.next >= max {
			return out, false, nil
		}
		if scanned >= maxScanPerPop {
			return out, true, nil
		}
		msgs, err := b.store.Read(ctx, g.topic, qid, qs.next, opts.max-len(out), b.cfg.Limits.MaxBodySize*2)
		var rangeErr *store.OffsetRangeError
		if errors.As(err, &rangeErr) && qs.next < rangeErr.Min {
			qs.skipTo(rangeErr.Min)
			g.dirty = true
			continue
		}
		if err != nil {
			return out, false, err
		}
		if len(msgs) == 0 {
			return out, false, nil
		}
		for i := range msgs {
			m := &msgs[i]
			if m.QueueOffset < qs.next {
				continue
			}
			scanned++
			g.dirty = true
			qs.next = m.QueueOffset + 1
			if !opts.filter.match(m.Tag) {
				// The proxy acks messages the subscription filters out.
				qs.markDone(m.QueueOffset)
				continue
			}
			e := &inflight{offset: m.QueueOffset, idx: -1}
			if at := deliverAt(m); at > now {
				// Not due yet: held invisible until its delivery time,
				// without counting a delivery.
				e.deadline = at
				qs.track(e)
				continue
			}
			if made := carried(m); made >= opts.maxAttempts && g.deadLetters() {
				// Arrived with its attempts used up (a copy read from a
				// dead-letter topic by a group with fewer attempts, or a
				// send that set delivery_attempt): straight to this
				// group's dead-letter topic, as the proxy's pop filter does.
				if err := b.deadLetter(ctx, g.group, m, made+1); err != nil {
					// Retried by the next pop: due now, no attempt counted.
					e.deadline = now
					qs.track(e)
					return out, false, err
				}
				qs.markDone(m.QueueOffset)
				continue
			}
			qs.inflight[e.offset] = e
			out = append(out, b.deliverLocked(g, qid, qs, e, m, opts))
			if len(out) >= opts.max {
				break
			}
		}
	}
	return out, false, nil
}

// deliverLocked makes e a new delivery: one more attempt, a fresh nonce and
// a new deadline.
func (b *Broker) deliverLocked(g *groupTopic, qid int32, qs *queueState, e *inflight, m *store.StoredMessage, opts popOptions) popped {
	now := opts.now.UnixMilli()
	e.attempts++
	e.nonce = b.newNonce()
	e.popTime = now
	e.deadline = now + opts.invisible.Milliseconds()
	if e.autoRenew != opts.autoRenew {
		if opts.autoRenew {
			g.autoRenew++
		} else {
			g.autoRenew--
		}
	}
	e.autoRenew = opts.autoRenew
	e.renewFrom = now
	e.client = opts.client
	if e.idx >= 0 {
		heap.Fix(&qs.due, e.idx)
	} else {
		heap.Push(&qs.due, e)
	}
	return popped{msg: m, attempts: carried(m) + e.attempts, handle: receipt{
		broker: b.cfg.Name, topic: g.topic, queueID: qid, offset: e.offset,
		nonce: e.nonce, popTime: now, deadline: e.deadline,
	}}
}

// carried is the number of deliveries a stored message brings with it: 0
// for a fresh send, the reconsume count of a dead-letter copy (or whatever
// delivery_attempt a producer set, which the proxy stores the same way). A
// group's n-th delivery of the message reports carried+n as its
// delivery_attempt, and the maximum attempts are counted against that sum.
func carried(m *store.StoredMessage) int32 {
	return max(m.ReconsumeTimes, 0)
}

// deliverAt reads a message's delivery time (unix ms), 0 if none.
func deliverAt(m *store.StoredMessage) int64 {
	s, ok := m.Properties[propTimerDeliver]
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// lookupLocked finds what a receipt names, the way the proxy judges
// handles: one past its invisible time is INVALID_RECEIPT_HANDLE, and so is
// one never issued to this group (no such queue state, or an offset the
// group was never given). Otherwise e is the in-flight entry when the
// receipt is the message's current delivery (whose deadline counts, auto
// renewals included), and nil when the receipt is stale but still within
// its own invisible time: the message was acked, dead-lettered or delivered
// again since. Callers answer a stale receipt OK and change nothing.
func (g *groupTopic) lookupLocked(r receipt, now int64) (qs *queueState, e *inflight, err error) {
	qs = g.queues[r.queueID]
	if qs == nil || r.offset >= qs.next {
		return nil, nil, statusErr(rmqpb.Code_INVALID_RECEIPT_HANDLE, "receipt handle is unknown to group %s", g.group)
	}
	if e = qs.inflight[r.offset]; e != nil && e.nonce == r.nonce && e.attempts > 0 {
		if e.deadline <= now {
			return nil, nil, statusErr(rmqpb.Code_INVALID_RECEIPT_HANDLE, "receipt handle is expired")
		}
		return qs, e, nil
	}
	if r.deadline <= now {
		return nil, nil, statusErr(rmqpb.Code_INVALID_RECEIPT_HANDLE, "receipt handle is expired")
	}
	return qs, nil, nil
}

// pendingAck is one entry of an AckMessage: its group state and receipt
// as resolved, and its outcome.
type pendingAck struct {
	g   *groupTopic
	r   receipt
	err error
}

// ackAll completes the deliveries the receipts name, holding each group
// state's lock once for a run of entries of that state; entries that failed
// to resolve are left as they are. A stale receipt is a no-op (see
// lookupLocked), so a retried ack succeeds and an old handle never acks a
// newer delivery. Long polls are woken only for a FIFO group, where an ack
// can free a held queue; for other groups an ack makes nothing deliverable.
func (b *Broker) ackAll(acks []pendingAck, now time.Time, fifo bool) {
	ms := now.UnixMilli()
	for i := 0; i < len(acks); {
		g := acks[i].g
		if acks[i].err != nil || g == nil {
			i++
			continue
		}
		done := 0
		g.mu.Lock()
		for ; i < len(acks) && acks[i].g == g; i++ {
			if acks[i].err != nil {
				continue
			}
			var ok bool
			ok, acks[i].err = g.ackLocked(acks[i].r, ms)
			if ok {
				done++
			}
		}
		if done > 0 {
			if fifo {
				g.signalLocked()
			}
			b.progressChanged()
		}
		g.mu.Unlock()
	}
}

// ackLocked completes the delivery r names; ok reports that it was the
// message's current delivery and is now done.
func (g *groupTopic) ackLocked(r receipt, now int64) (ok bool, err error) {
	qs, e, err := g.lookupLocked(r, now)
	if err != nil || e == nil {
		return false, err
	}
	if e.autoRenew {
		g.autoRenew--
	}
	qs.markDone(e.offset)
	return true, nil
}

// changeInvisible moves the deadline of a delivery and returns its new
// receipt; the old one becomes stale. For a stale receipt it changes
// nothing and returns a fresh receipt that names nothing either (acking it
// is a no-op too): the message it named is done or belongs to a newer
// delivery, which an old handle must not disturb.
func (b *Broker) changeInvisible(g *groupTopic, r receipt, d time.Duration, now time.Time) (receipt, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := now.UnixMilli()
	qs, e, err := g.lookupLocked(r, ms)
	if err != nil {
		return receipt{}, err
	}
	r.nonce = b.newNonce()
	r.deadline = ms + d.Milliseconds()
	if e == nil {
		return r, nil
	}
	if e.autoRenew {
		e.autoRenew = false
		g.autoRenew--
	}
	e.nonce = r.nonce
	e.deadline = r.deadline
	heap.Fix(&qs.due, e.idx)
	g.signalLocked()
	b.progressChanged()
	return r, nil
}

// forwardToDLQ sends the message a receipt names to the group's dead-letter
// topic and acks it; a stale receipt is a no-op. The copy carries the
// attempts made so far, this delivery included. A group reading its own
// dead-letter topic keeps the message in flight instead (see doc.go).
func (b *Broker) forwardToDLQ(ctx context.Context, g *groupTopic, r receipt, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	qs, e, err := g.lookupLocked(r, now.UnixMilli())
	if err != nil || e == nil || !g.deadLetters() {
		return err
	}
	m, err := b.readOne(ctx, g.topic, r.queueID, r.offset)
	if err != nil && !errors.Is(err, store.ErrOffsetOutOfRange) {
		return err
	}
	if m != nil {
		if err := b.deadLetter(ctx, g.group, m, carried(m)+e.attempts); err != nil {
			return err
		}
	}
	if e.autoRenew {
		g.autoRenew--
	}
	qs.markDone(e.offset)
	g.signalLocked()
	b.progressChanged()
	return nil
}

// renew extends auto-renewed deliveries about to expire while their
// client lives (up to AutoRenewMax), and hands those of a vanished client
// back after one second, as the proxy does.
//
// g.autoRenew only lets groups without such deliveries skip the scan. It is
// recounted here because entries also leave through paths that do not
// adjust it (a due entry filtered out, dead-lettered or gone from the
// store); a count left too high would scan every in-flight entry of the
// group every tick for the broker's life.
func (b *Broker) renew(g *groupTopic, now time.Time, alive func(string) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.autoRenew == 0 {
		return
	}
	ms := now.UnixMilli()
	lim := &b.cfg.Limits
	changed, touched := false, false
	count := 0
	for _, qs := range g.queues {
		for _, e := range qs.inflight {
			if !e.autoRenew {
				continue
			}
			if e.deadline-ms > lim.AutoRenewAhead.Milliseconds() {
				count++
				continue
			}
			touched = true
			switch {
			case ms-e.renewFrom >= lim.AutoRenewMax.Milliseconds():
				e.autoRenew = false
			case alive(e.client):
				e.deadline = ms + lim.AutoRenewSlice.Milliseconds()
				heap.Fix(&qs.due, e.idx)
				count++
			default:
				e.autoRenew = false
				e.deadline = ms + time.Second.Milliseconds()
				heap.Fix(&qs.due, e.idx)
				changed = true
			}
		}
	}
	g.autoRenew = count
	if changed {
		g.signalLocked()
	}
	if touched {
		b.progressChanged()
	}
}
