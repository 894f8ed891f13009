package timer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store"
)

// Timer delivers messages at their delivery time. All methods are safe for
// concurrent use.
type Timer struct {
	opts  Options
	st    *store.Store
	log   *zap.Logger
	clock Clock
	tlog  *timerLog

	mu    sync.Mutex // guards wheel; held while a record is logged and inserted
	wheel *wheel
	wake  chan struct{} // cap 1: the dequeuer should re-plan its sleep

	// Enqueue progress: every system-topic offset below enqNext has a log
	// record and a wheel entry. enqCh is closed and replaced on each move.
	enqMu   sync.Mutex
	enqNext int64
	enqCh   chan struct{}
	enqErr  error
	skip    map[int64]bool // offsets at or past the checkpoint already in the log (recovery)

	handedOut atomic.Int64 // cursor time whose entries are all delivered (for the checkpoint)
	delivered atomic.Int64
	rolled    atomic.Int64

	ctx    context.Context // cancelled by Close; bounds deliveries
	cancel context.CancelFunc
	bg     sync.WaitGroup
	closed atomic.Bool
	closeM sync.Mutex
	saved  checkpoint
}

// Scheduled says where a scheduled message is kept until delivery.
type Scheduled struct {
	// Offset is the message's queue offset in SystemTopic (queue 0).
	Offset int64
	// At is the delivery time, unix ms.
	At int64
}

// Stats is a snapshot of the timer's counters.
type Stats struct {
	Pending     int   // entries in the wheel
	Delivered   int64 // messages handed to the Deliverer since Open
	Rolled      int64 // entries re-enqueued at the roll window since Open
	Cursor      int64 // unix ms: slots before it were handed out
	LogSegments int
}

// Open recovers the timer in opts.Dir (see the package doc) and starts it.
func Open(ctx context.Context, opts Options) (*Timer, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Timer{
		opts:  o,
		st:    o.Store,
		log:   o.Logger,
		clock: o.Clock,
		wake:  make(chan struct{}, 1),
		enqCh: make(chan struct{}),
		skip:  map[int64]bool{},
	}
	if err := o.FS.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("timer: create %s: %w", o.Dir, err)
	}
	cp, ok, err := readCheckpoint(o.FS, o.Dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		// A log without a checkpoint (a crash before the first one) may
		// hold entries of any time: take them all back.
		min, _ := o.Store.Offsets(SystemTopic, 0)
		cp = checkpoint{cursor: 0, enqNext: min}
	}
	// The timer syncs its log and checkpoint; the store may flush its
	// appends later. After a power loss the store can end before what the
	// timer recorded: those messages are gone, and the store hands their
	// offsets to new messages. Enqueueing resumes at the store's end and
	// the log's entries past it are dropped, or a new message would be
	// delivered at a lost one's time (or never queued).
	_, end := o.Store.Offsets(SystemTopic, 0)
	if cp.enqNext > end {
		t.log.Warn("timer: the store lost scheduled messages the timer had recorded (a power loss before its flush)",
			zap.Int64("from", end), zap.Int64("to", cp.enqNext))
		cp.enqNext = end
	}
	lost := 0
	t.saved = cp
	t.wheel = newWheel(o.Precision.Milliseconds(), o.Slots, cp.cursor)
	recovered := 0
	t.tlog, err = openLog(o.FS, o.Dir, o.SegmentRecords, func(e entry) {
		if e.offset >= end {
			lost++
			return
		}
		if e.offset >= cp.enqNext {
			t.skip[e.offset] = true
		}
		if e.slot >= cp.cursor {
			t.wheel.insert(e)
			recovered++
		}
	})
	if err != nil {
		return nil, err
	}
	if lost > 0 {
		t.log.Warn("timer: dropped log entries of scheduled messages the store lost", zap.Int("entries", lost))
	}
	t.enqNext = cp.enqNext
	t.handedOut.Store(t.wheel.cursor())
	t.log.Info("timer recovered", zap.Int("pending", recovered), zap.Int64("cursor_ms", cp.cursor),
		zap.Int64("enqueue_from", cp.enqNext))
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.bg.Add(3)
	go t.enqueueLoop()
	go t.dequeueLoop()
	go t.checkpointLoop()
	return t, nil
}

// Schedule keeps msg until at and then delivers it to msg.Topic /
// msg.QueueID. It returns once the message is durable in SystemTopic (as
// durable as the store's appends) and known to the wheel, or when ctx ends
// after the append: the message is then still delivered. A time in the past
// delivers at once.
//
// When the store wrote the message but no fsync confirmed it (a sync-flush
// store whose fsync failed, or ctx ended first), Schedule returns at once
// with the Scheduled and an error wrapping store.ErrNotDurable: the
// message was not accepted; it is delivered if it survives (no crash came,
// or the crash kept it), and lost otherwise.
func (t *Timer) Schedule(ctx context.Context, msg store.Message, at time.Time) (Scheduled, error) {
	if t.closed.Load() {
		return Scheduled{}, ErrClosed
	}
	if msg.Topic == "" || msg.Topic == SystemTopic || msg.QueueID < 0 {
		return Scheduled{}, fmt.Errorf("%w: destination %q/%d", ErrInvalidMessage, msg.Topic, msg.QueueID)
	}
	now := t.clock.Now()
	if at.Sub(now) > t.opts.MaxDelay {
		return Scheduled{}, fmt.Errorf("%w: %s ahead, at most %s", ErrDelayTooLong, at.Sub(now).Round(time.Millisecond), t.opts.MaxDelay)
	}
	atMs := at.UnixMilli()
	props := make(map[string]string, len(msg.Properties)+4)
	maps.Copy(props, msg.Properties)
	props[PropRealTopic] = msg.Topic
	props[PropRealQueue] = strconv.Itoa(int(msg.QueueID))
	props[PropDeliverAt] = strconv.FormatInt(atMs, 10)
	props[PropEnqueueTime] = strconv.FormatInt(now.UnixMilli(), 10)
	sys := msg
	sys.Topic = SystemTopic
	sys.QueueID = 0
	sys.Properties = props
	res, err := t.st.Append(ctx, []store.Message{sys})
	if err != nil && !errors.Is(err, store.ErrNotDurable) {
		return Scheduled{}, fmt.Errorf("timer: store scheduled message: %w", err)
	}
	sc := Scheduled{Offset: res.FirstOffset, At: atMs}
	if err != nil {
		// Written, but no fsync confirmed it (the fsync failed, or ctx
		// ended first): a power loss may take it back, so this is no
		// acceptance. Under sync flush the tail sees a message only once
		// an fsync covered it, so waiting for the wheel would only wait
		// for ctx to end, and then report it accepted (it did: the
		// message was lost after Schedule returned nil).
		return sc, fmt.Errorf("timer: store scheduled message: %w", err)
	}
	// Durable in the store: should ctx end or the timer close before the
	// tail logs it, the tail (or the next Open) still enqueues it.
	_ = t.waitEnqueued(ctx, res.FirstOffset)
	return sc, nil
}

// waitEnqueued waits until the tail has logged offset off.
func (t *Timer) waitEnqueued(ctx context.Context, off int64) error {
	for {
		t.enqMu.Lock()
		next, ch, eerr := t.enqNext, t.enqCh, t.enqErr
		t.enqMu.Unlock()
		if next > off {
			return nil
		}
		if eerr != nil {
			return eerr
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.ctx.Done():
			return ErrClosed
		}
	}
}

// Stats returns the timer's counters.
func (t *Timer) Stats() Stats {
	t.mu.Lock()
	pending := t.wheel.len()
	t.mu.Unlock()
	return Stats{
		Pending:     pending,
		Delivered:   t.delivered.Load(),
		Rolled:      t.rolled.Load(),
		Cursor:      t.handedOut.Load(),
		LogSegments: t.tlog.segments(),
	}
}

// Close stops delivering, writes the final checkpoint and closes the timer
// log. It does not close the store. Pending messages stay for the next Open.
func (t *Timer) Close() error {
	t.closeM.Lock()
	defer t.closeM.Unlock()
	if t.closed.Swap(true) {
		return nil
	}
	t.cancel()
	t.bg.Wait()
	err := t.checkpoint()
	t.tlog.close()
	return err
}

// enqueueLoop tails SystemTopic and enqueues each message.
func (t *Timer) enqueueLoop() {
	defer t.bg.Done()
	t.enqMu.Lock()
	next := t.enqNext
	t.enqMu.Unlock()
	for {
		arrived := t.st.Arrivals(SystemTopic)
		msgs, err := t.st.Read(t.ctx, SystemTopic, 0, next, 256, 1<<20)
		var rangeErr *store.OffsetRangeError
		switch {
		case errors.As(err, &rangeErr) && next < rangeErr.Min:
			t.log.Error("timer: scheduled messages were removed by store retention before they were enqueued",
				zap.Int64("from", next), zap.Int64("to", rangeErr.Min))
			next = rangeErr.Min
			t.publishEnqueued(next, nil)
			continue
		case err != nil:
			if t.ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
				t.publishEnqueued(next, ErrClosed)
				return
			}
			t.log.Error("timer: read scheduled messages", zap.Error(err))
			if !t.sleep(100 * time.Millisecond) {
				t.publishEnqueued(next, ErrClosed)
				return
			}
			continue
		}
		for i := range msgs {
			m := &msgs[i]
			if m.QueueOffset < next {
				continue
			}
			if t.skip[m.QueueOffset] {
				delete(t.skip, m.QueueOffset)
			} else if err := t.enqueue(m); err != nil {
				t.log.Error("timer: enqueue", zap.Int64("offset", m.QueueOffset), zap.Error(err))
				if !t.sleep(100 * time.Millisecond) {
					t.publishEnqueued(next, ErrClosed)
					return
				}
				break
			}
			next = m.QueueOffset + 1
		}
		t.publishEnqueued(next, nil)
		if len(msgs) > 0 {
			continue
		}
		select {
		case <-arrived:
		case <-t.ctx.Done():
			t.publishEnqueued(next, ErrClosed)
			return
		}
	}
}

func (t *Timer) publishEnqueued(next int64, err error) {
	t.enqMu.Lock()
	defer t.enqMu.Unlock()
	if next == t.enqNext && err == nil {
		return
	}
	t.enqNext = next
	t.enqErr = err
	close(t.enqCh)
	t.enqCh = make(chan struct{})
}

// sleep waits d on the real clock (error back-off); false when closing.
func (t *Timer) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-t.ctx.Done():
		return false
	}
}

// enqueue logs and inserts one message of SystemTopic.
func (t *Timer) enqueue(m *store.StoredMessage) error {
	at, err := strconv.ParseInt(m.Properties[PropDeliverAt], 10, 64)
	if err != nil {
		t.log.Error("timer: scheduled message without a valid delivery time; delivering it now",
			zap.Int64("offset", m.QueueOffset), zap.String(PropDeliverAt, m.Properties[PropDeliverAt]))
		at = 0
	}
	now := t.clock.Now().UnixMilli()
	e := entry{at: at, slot: at, offset: m.QueueOffset}
	if roll := t.opts.RollWindow.Milliseconds(); at-now > roll {
		e.slot = now + roll
		e.rolled = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.wheel.cursor(); e.slot < c {
		e.slot = c
	}
	if err := t.tlog.append(e); err != nil {
		return err
	}
	t.wheel.insert(e)
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return nil
}

// dequeueLoop turns the wheel and delivers due entries.
func (t *Timer) dequeueLoop() {
	defer t.bg.Done()
	var due []entry
	for {
		now := t.clock.Now().UnixMilli()
		t.mu.Lock()
		due = t.wheel.advance(now, due[:0])
		cursor := t.wheel.cursor()
		next, any := t.wheel.nextDue()
		t.mu.Unlock()
		// A batch is finished even when Close comes meanwhile, so that the
		// final checkpoint is exact; only a failing delivery is abandoned.
		for _, e := range due {
			if !t.deliver(e) {
				return // closing: the checkpoint keeps the old cursor
			}
		}
		t.handedOut.Store(cursor)
		if len(due) > 0 {
			continue
		}
		var fire <-chan time.Time
		var stop func() bool
		if any {
			fire, stop = t.clock.Timer(time.Duration(next-now) * time.Millisecond)
		}
		select {
		case <-fire:
		case <-t.wake:
		case <-t.ctx.Done():
			if stop != nil {
				stop()
			}
			return
		}
		if stop != nil {
			stop()
		}
	}
}

// deliver hands one due entry out, retrying until it works or the timer
// closes (false).
func (t *Timer) deliver(e entry) bool {
	for attempt := 0; ; attempt++ {
		err := t.deliverOnce(e)
		if err == nil {
			return true
		}
		if t.ctx.Err() != nil {
			return false
		}
		t.log.Warn("timer: delivery failed; retrying", zap.Int64("offset", e.offset), zap.Int("attempt", attempt), zap.Error(err))
		if !t.sleep(min(time.Duration(attempt+1)*50*time.Millisecond, time.Second)) {
			return false
		}
	}
}

func (t *Timer) deliverOnce(e entry) error {
	ctx := context.WithoutCancel(t.ctx)
	msgs, err := t.st.Read(ctx, SystemTopic, 0, e.offset, 1, 0)
	if errors.Is(err, store.ErrOffsetOutOfRange) {
		t.log.Error("timer: scheduled message was removed by store retention before its delivery",
			zap.Int64("offset", e.offset), zap.Int64("deliver_at", e.at))
		return nil
	}
	if err != nil {
		return err
	}
	if len(msgs) == 0 || msgs[0].QueueOffset != e.offset {
		return fmt.Errorf("timer: scheduled message %d not readable yet", e.offset)
	}
	m := msgs[0].Message
	if at, err := strconv.ParseInt(m.Properties[PropDeliverAt], 10, 64); err != nil || at != e.at {
		// Not the message this entry was made for: its offset was reused
		// after the store lost the original. Its own entry delivers it.
		t.log.Error("timer: the message at a scheduled offset is not the one scheduled there; skipping the entry",
			zap.Int64("offset", e.offset), zap.Int64("deliver_at", e.at), zap.String(PropDeliverAt, m.Properties[PropDeliverAt]))
		return nil
	}
	if e.rolled {
		props := maps.Clone(m.Properties)
		n, _ := strconv.Atoi(props[PropRollTimes])
		props[PropRollTimes] = strconv.Itoa(n + 1)
		m.Properties = props
		// A re-append no fsync confirmed is retried like a failed one: the
		// entry is done only once its successor is durable (a copy that
		// survives as well is delivered twice, never lost).
		if _, err := t.st.Append(ctx, []store.Message{m}); err != nil {
			return err
		}
		t.rolled.Add(1)
		return nil
	}
	real, err := realMessage(m)
	if err != nil {
		t.log.Error("timer: dropping a scheduled message without a destination", zap.Int64("offset", e.offset), zap.Error(err))
		return nil
	}
	if err := t.opts.Deliverer.Deliver(ctx, real); err != nil {
		return err
	}
	t.delivered.Add(1)
	return nil
}

// realMessage turns a SystemTopic message back into the message for its
// destination; TIMER_DELIVER_MS stays.
func realMessage(m store.Message) (store.Message, error) {
	topic := m.Properties[PropRealTopic]
	q, err := strconv.ParseInt(m.Properties[PropRealQueue], 10, 32) // a queue id is an int32
	if topic == "" || err != nil || q < 0 {
		return store.Message{}, fmt.Errorf("%w: REAL_TOPIC %q REAL_QID %q", ErrInvalidMessage, topic, m.Properties[PropRealQueue])
	}
	props := maps.Clone(m.Properties)
	delete(props, PropRealTopic)
	delete(props, PropRealQueue)
	delete(props, PropRollTimes)
	delete(props, PropEnqueueTime)
	m.Topic = topic
	m.QueueID = int32(q)
	m.Properties = props
	return m, nil
}

// checkpointLoop writes the checkpoint when it moved.
func (t *Timer) checkpointLoop() {
	defer t.bg.Done()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(t.opts.CheckpointInterval):
		}
		if err := t.checkpoint(); err != nil {
			t.log.Error("timer: checkpoint", zap.Error(err))
		}
	}
}

// checkpoint syncs the log, then records the cursor and the enqueue
// position, then drops log segments the cursor has passed.
func (t *Timer) checkpoint() error {
	t.enqMu.Lock()
	enq := t.enqNext
	t.enqMu.Unlock()
	cp := checkpoint{cursor: t.handedOut.Load(), enqNext: enq}
	if cp == t.saved {
		return nil
	}
	if err := t.tlog.sync(); err != nil {
		return err
	}
	if err := writeCheckpoint(t.opts.FS, t.opts.Dir, cp); err != nil {
		return err
	}
	t.saved = cp
	return t.tlog.dropBefore(cp.cursor)
}
