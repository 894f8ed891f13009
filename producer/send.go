package producer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twinmq/twinmq/batch"
	"github.com/twinmq/twinmq/failover"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

// batchKey is what a batch shares: one queue of one broker of one cluster's
// physical topic (all in target), and for FIFO messages their group, so a
// group batches only with itself and, one batch of a key being in flight at
// a time, stays in order.
type batchKey struct {
	target *brokerTarget
	queue  int32
	group  string
}

// pending is one message on its way: validated, stamped with its id and
// lane, and carrying its retry state. The accumulator holds it while it is
// buffered or in flight.
type pending struct {
	msg       *Message
	topic     *topicState
	props     map[string]string
	lane      string
	id        string
	size      int
	groupHash uint64
	start     time.Time

	handle   *failover.Handle[*brokerTarget] // the current attempt's target
	tried    []*failover.Handle[*brokerTarget]
	attempts int
	rounds   int // times every target was tried
	// noTimer counts the targets of this round that refused the message's
	// delivery time (ErrDelayUnsupported: a broker without the timer).
	noTimer   int
	lastErr   error // the last failed attempt's error
	refreshed bool  // routes were asked for on this send's behalf
	sent      bool  // a failed attempt before this one may have reached a broker

	transactional bool

	trace    string // the trace context a send hook set
	ownProps bool   // props is a copy a send hook may write

	sctx sendCtx         // the send's context when the caller's has no deadline (see sendContext)
	ctx  context.Context // the send's context, bounded by sendDeadline

	// Asynchronous sends only.
	cancel context.CancelFunc
	cb     func(*SendResult, error)
	onDone func(driver.SendResult, error)
}

// Send sends one message and returns where it was stored. With batching on,
// it may share a request with concurrent sends to the same target; it never
// waits for a timer while its target has nothing in flight.
//
// A failed attempt is retried on another broker or cluster until ctx ends
// (or, without a deadline in ctx, for timeouts.sendDeadline). The error
// matches one of this package's sentinels, a class of package rmqerr, or
// ctx's error, and carries a broker's refusal as an *rmqerr.Error: see
// "Errors" in the package doc for every outcome.
func (p *Producer) Send(ctx context.Context, m *Message) (res *SendResult, err error) {
	if !p.enter() {
		return nil, closedError(m)
	}
	defer p.leave()
	pd, st, err := p.prepare(ctx, m)
	if err != nil {
		return nil, err
	}
	if done := p.sendStarts(ctx, pd); done != nil {
		defer func() { done(res, err) }()
	}
	ctx, cancel := p.sendContext(ctx, pd, st.sendDeadline)
	defer cancel()
	pd.ctx = ctx
	for {
		t, q, err := p.pick(ctx, pd)
		if err != nil {
			return nil, p.fail(ctx, pd, err)
		}
		var r driver.SendResult
		switch {
		case st.batching && pd.msg.DeliveryTime.IsZero():
			r, err = p.acc.Add(ctx, batchKey{t, q, m.MessageGroup}, pd, pd.size)
		case m.MessageGroup != "":
			r, err = p.sendInLine(ctx, batchKey{t, q, m.MessageGroup}, pd)
		default:
			r, err = p.sendAloneReserved(ctx, t, q, pd)
		}
		if err == nil {
			res := p.succeed(pd, t, r)
			p.recycle(pd)
			return res, nil
		}
		if !p.retryable(ctx, pd, err) {
			return nil, p.fail(ctx, pd, err)
		}
	}
}

// newPending returns zeroed send state, recycled when possible.
func (p *Producer) newPending() *pending {
	if pd, ok := p.pendings.Get().(*pending); ok {
		return pd
	}
	return new(pending)
}

// recycle takes back the state of a synchronous send that succeeded. Only
// then is nothing else left holding it: its result came back through the
// accumulator or the request, so no flush still reads it. A send that
// failed may have given up on an item still in flight (its context ended)
// and is left to the garbage collector.
func (p *Producer) recycle(pd *pending) {
	*pd = pending{}
	p.pendings.Put(pd)
}

// SendAsync sends one message without waiting for the outcome, which cb
// receives exactly once. It blocks only while the buffered bytes are at
// batching.totalBatchMaxBytes (or until ctx ends), and for a FIFO message
// while no target of its topic is known yet. Bad input is reported to
// cb before SendAsync returns; other outcomes arrive on the producer's
// goroutines, so cb must be quick, must not block and must not call Close
// (Close waits for every callback). ctx bounds the whole send, retries
// included, as for Send: when it ends while the message waits behind a
// request of its target, cb gets ctx's error at once (within one tick of
// the accumulator, batching.maxDelay/2, at the latest) and the message's
// bytes are given back; a message already in a request gets that request's
// outcome.
func (p *Producer) SendAsync(ctx context.Context, m *Message, cb func(*SendResult, error)) {
	if cb == nil {
		cb = func(*SendResult, error) {}
	}
	if !p.enter() {
		cb(nil, closedError(m))
		return
	}
	pd, st, err := p.prepare(ctx, m)
	if err != nil {
		p.leave()
		cb(nil, err)
		return
	}
	p.start(ctx, pd, st, cb)
}

// start runs an asynchronous send of a prepared message; the caller has
// entered.
func (p *Producer) start(ctx context.Context, pd *pending, st *settings, cb func(*SendResult, error)) {
	if done := p.sendStarts(ctx, pd); done != nil {
		user := cb
		cb = func(r *SendResult, err error) {
			done(r, err)
			user(r, err)
		}
	}
	pd.ctx, pd.cancel = p.sendContext(ctx, pd, st.sendDeadline)
	pd.cb = cb
	pd.onDone = func(r driver.SendResult, err error) { p.asyncOutcome(pd, r, err) }
	// The caller's goroutine may wait for buffer space but not for routes:
	// when no target can be picked at once, the send goes on in the
	// background, as a retry does. Except for a FIFO message: sends of a
	// group in the background would race each other, so it waits here.
	t, q, err := p.pickNow(pd)
	if err == nil {
		p.attempt(pd, t, q)
		return
	}
	if pd.msg.MessageGroup != "" {
		p.dispatch(pd, nil)
		return
	}
	// The message's bytes are held while it waits, so that the cap bounds
	// sends waiting for routes as it bounds the others, and SendAsync
	// blocks (or fails fast) at the cap here as it would later.
	release, err := p.acc.Reserve(pd.ctx, pd.size)
	if err != nil {
		p.asyncFinish(pd, nil, p.fail(pd.ctx, pd, err))
		return
	}
	go p.dispatch(pd, release)
}

// SendBatch sends several messages at once and returns one result per
// message, in order. The messages go through the accumulator together, so
// those bound to the same target share requests; messages of one FIFO group
// keep their order. If any message is invalid nothing is sent and the error
// names the first invalid one. Otherwise the error, when not nil, is a
// *BatchError with one entry per message, and results hold nil for the
// messages that failed.
//
// An empty batch (nil or no message) sends nothing and succeeds: an empty,
// non-nil result slice and a nil error, as sending zero records does in
// other Go clients. It fails only with ErrClosed on a closed producer, like
// every send.
func (p *Producer) SendBatch(ctx context.Context, msgs []*Message) ([]*SendResult, error) {
	if p.closed.Load() {
		if len(msgs) == 0 {
			return nil, fmt.Errorf("send batch: %w", ErrClosed)
		}
		return nil, closedError(msgs[0])
	}
	if len(msgs) == 0 {
		return []*SendResult{}, nil
	}
	pds := make([]*pending, len(msgs))
	var st *settings
	for i, m := range msgs {
		pd, s, err := p.prepare(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("message %d of %d: %w", i, len(msgs), err)
		}
		pds[i], st = pd, s
	}

	results := make([]*SendResult, len(msgs))
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	wg.Add(len(msgs))
	for i, pd := range pds {
		cb := func(r *SendResult, err error) {
			results[i], errs[i] = r, err
			wg.Done()
		}
		if !p.enter() {
			cb(nil, closedError(pd.msg))
			continue
		}
		p.start(ctx, pd, st, cb)
	}
	wg.Wait()
	if slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		return results, &BatchError{Errs: errs}
	}
	return results, nil
}

func closedError(m *Message) error {
	if m == nil {
		return ErrClosed
	}
	return fmt.Errorf("send to topic %q: %w", m.Topic, ErrClosed)
}

func withDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// prepare validates m against the configuration in force and the lane of
// ctx, and builds its pending state.
func (p *Producer) prepare(ctx context.Context, m *Message) (*pending, *settings, error) {
	st := p.settings.Load()
	now := time.Now()
	if err := validateShape(m, st.maxBody, now); err != nil {
		return nil, nil, err
	}
	ts, err := p.topicFor(ctx, st, m.Topic)
	if err != nil {
		return nil, nil, err
	}
	pd := p.newPending()
	*pd = pending{msg: m, topic: ts, props: m.Properties, size: m.size(), start: now}
	if name, ok := lane.FromContext(ctx); ok && name != lane.Base {
		if err := lane.Validate(name); err != nil {
			return nil, nil, fmt.Errorf("topic %q: %w: %w", m.Topic, ErrMalformedLane, err)
		}
		props := make(map[string]string, len(m.Properties)+1)
		maps.Copy(props, m.Properties)
		props[lane.PropertyLane] = name
		pd.props, pd.lane = props, name
		pd.size += len(lane.PropertyLane) + len(name)
	}
	if ts.shadow {
		pd.stampShadow()
	}
	// Every send, batched or alone, counts against the cap while in flight.
	if int64(pd.size) > st.maxBuffered {
		return nil, nil, fmt.Errorf("topic %q: message of %d bytes exceeds batching.totalBatchMaxBytes (%d): %w",
			m.Topic, pd.size, st.maxBuffered, ErrBodyTooLarge)
	}
	if m.MessageGroup != "" {
		h := fnv.New64a()
		_, _ = h.Write([]byte(m.MessageGroup))
		pd.groupHash = h.Sum64()
	}
	pd.id = p.ids.NextAt(now)
	return pd, st, nil
}

func (p *Producer) unknownTopic(topic string) error {
	known := slices.Sorted(maps.Keys(*p.topics.Load()))
	known = slices.DeleteFunc(known, isShadowKey)
	list := strings.Join(known, ", ")
	if len(known) > 10 {
		list = strings.Join(known[:10], ", ") + ", ..."
	}
	return fmt.Errorf("topic %q is not in the configuration (known: %s): %w", topic, list, ErrUnknownTopic)
}

// pick chooses the target of the next attempt. An ordinary message goes
// where failover sends it, avoiding the targets it already tried; when it
// has tried every target that is up (or, with none up, one down target) it
// starts over after a pause that grows with each round, so a send outlives
// a short outage of every cluster within its deadline without hammering
// the down brokers. A FIFO message goes to the healthy target its group hashes to,
// so the group keeps one queue while that queue's broker is healthy.
func (p *Producer) pick(ctx context.Context, pd *pending) (*brokerTarget, int32, error) {
	for {
		t, q, err := p.pickNow(pd)
		if err == nil {
			return t, q, nil
		}
		if !errors.Is(err, failover.ErrNoResource) {
			return nil, 0, err
		}
		// Everything was tried, or no cluster has a route yet: ask for the
		// routes now (once per send) rather than wait for the background
		// refresh.
		if len(pd.tried) == 0 && !pd.refreshed {
			pd.refreshed = true
			// Bounded by the send's deadline; a sendCtx cannot be derived
			// from cheaply, its caller's context can.
			base, left := detach(ctx, p.settings.Load().sendDeadline)
			rctx, cancel := context.WithTimeout(base, left)
			p.refreshAll(rctx)
			cancel()
			continue
		}
		if pd.noTimer > 0 && pd.noTimer == len(pd.tried) {
			// Every target refused the delivery time: none has the timer,
			// and another round would not give it one.
			return nil, 0, pd.lastErr
		}
		pd.tried = pd.tried[:0]
		pd.noTimer = 0
		pd.rounds++
		pause := min(time.Duration(1<<min(pd.rounds, 10))*10*time.Millisecond, time.Second)
		timer := time.NewTimer(pause)
		select {
		case <-p.bgCtx.Done():
			// Close gave up waiting for the sends in progress.
			timer.Stop()
			return nil, 0, fmt.Errorf("%w: Close gave up while the send waited for a target", ErrClosed)
		case <-ctx.Done():
			timer.Stop()
			if pd.lastErr != nil {
				return nil, 0, &sendError{
					msg:  fmt.Sprintf("no target took it before the context ended (%v); last failure: %v", ctx.Err(), pd.lastErr),
					errs: []error{ErrNoTarget, pd.lastErr, ctx.Err()},
				}
			}
			text, errs := p.routeErrors(pd.topic)
			return nil, 0, &sendError{
				msg:  fmt.Sprintf("no target: no cluster of the topic has a route%s (%v)", text, ctx.Err()),
				errs: append([]error{ErrNoTarget, ctx.Err()}, errs...),
			}
		case <-timer.C:
		}
	}
}

// routeErrors describes why ts's clusters have no route, for an error:
// "; <cluster>: <error>" for each cluster whose last route query failed,
// and those errors (a refusal such as TOPIC_NOT_FOUND among them).
func (p *Producer) routeErrors(ts *topicState) (string, []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var (
		b    strings.Builder
		errs []error
	)
	for _, c := range ts.clusters {
		if c.routeErr != nil {
			fmt.Fprintf(&b, "; %s: %v", c.name, c.routeErr)
			errs = append(errs, c.routeErr)
		}
	}
	return b.String(), errs
}

// pickNow picks the target of the next attempt among the targets known now,
// without waiting; ErrNoResource means there is none left to try.
func (p *Producer) pickNow(pd *pending) (*brokerTarget, int32, error) {
	var (
		h   *failover.Handle[*brokerTarget]
		err error
	)
	if pd.msg.MessageGroup != "" {
		h, err = pickGroup(pd)
	} else {
		h, err = p.pickSticky(pd)
	}
	if err != nil {
		return nil, 0, err
	}
	if len(pd.tried) > 0 && h.IsDown() {
		// Failover hands out a down target only when nothing is up. A
		// round of retries then costs one attempt, not one per target:
		// the send pauses before the next, so that sends waiting out an
		// outage of every broker do not hammer them.
		return nil, 0, fmt.Errorf("%w: every target of the topic is down", failover.ErrNoResource)
	}
	pd.handle = h
	pd.attempts++
	t := h.Value()
	if pd.msg.MessageGroup != "" {
		return t, t.queueFor(pd.groupHash), nil
	}
	return t, t.queue(pd.size, p.settings.Load().rotateBytes), nil
}

// pickGroup returns, among the targets of the most preferred priority that
// are up and not yet tried, the one a FIFO group hashes to. With none up it
// defers to the picker, which still returns a target.
func pickGroup(pd *pending) (*failover.Handle[*brokerTarget], error) {
	hs := pd.topic.picker.Handles()
	up := hs[:0]
	prio := 0
	for _, h := range hs {
		if h.IsDown() || slices.Contains(pd.tried, h) {
			continue
		}
		if len(up) > 0 && h.Priority() != prio {
			break
		}
		prio = h.Priority()
		up = append(up, h)
	}
	if len(up) == 0 {
		return pd.topic.picker.PickExcluding(pd.tried)
	}
	return up[pd.groupHash%uint64(len(up))], nil
}

// retryable decides whether a failed attempt goes on to another target, and
// records the target as tried.
func (p *Producer) retryable(ctx context.Context, pd *pending, err error) bool {
	if errors.Is(err, ErrDelayUnsupported) && !ended(ctx) {
		// The broker has no timer (RocketMQ 4.x over remoting); another
		// cluster of the topic may have one (a migration maps a logic topic
		// to a 4.x and a 5.x cluster). The refusal is the broker's version,
		// not its health: the target is tried once per round, and a round
		// in which every target refused ends the send (pick).
		pd.tried = append(pd.tried, pd.handle)
		pd.lastErr = err
		pd.noTimer++
		return true
	}
	if ended(ctx) || !retryableError(err) {
		return false
	}
	if p.closed.Load() && errors.Is(err, driver.ErrClosed) {
		// Close gave up waiting and closed the clients: no successor.
		return false
	}
	t := pd.handle.Value()
	if t.retried != nil {
		t.retried.Inc()
	}
	pd.tried = append(pd.tried, pd.handle)
	pd.lastErr = err
	pd.sent = pd.sent || !errors.Is(err, batch.ErrNotSent)
	return true
}

// retryableError: failures another target (or the same later) may not
// have. A topic missing on one cluster is worth trying on the other; a
// client closed by a reload is replaced by its successor.
func retryableError(err error) bool {
	return driver.Retryable(err) || errors.Is(err, driver.ErrNotFound) || errors.Is(err, driver.ErrClosed)
}

func (p *Producer) succeed(pd *pending, t *brokerTarget, r driver.SendResult) *SendResult {
	if t.ok != nil {
		t.ok.Inc()
	}
	if pd.topic.latency != nil {
		pd.topic.latency.Observe(time.Since(pd.start).Seconds())
	}
	return &SendResult{
		MessageID:     r.MessageID,
		Topic:         pd.msg.Topic,
		Cluster:       t.cluster,
		PhysicalTopic: t.physical,
		Endpoint:      t.endpoint,
		QueueID:       r.QueueID,
		Offset:        r.Offset,
		Lane:          pd.lane,
		Shadow:        pd.topic.shadow,
		Attempts:      pd.attempts,
	}
}

// fail ends a send that failed with err, its last attempt's error; ctx is
// the send's context.
func (p *Producer) fail(ctx context.Context, pd *pending, err error) error {
	switch {
	case errors.Is(err, ErrClosed):
	case errors.Is(err, batch.ErrClosed) || p.closed.Load() && errors.Is(err, driver.ErrClosed):
		// Close gave up on this send: the accumulator or the client it
		// was using is gone.
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, driver.ErrClosed):
		// A reload replaced the client of the target while the send's
		// context ended, before the retry on its successor.
		err = fmt.Errorf("%w: a reload replaced the cluster's client: %w", ErrUnavailable, err)
	}
	if !errors.Is(err, ErrBodyTooLarge) && errors.Is(err, batch.ErrTooLarge) {
		// A reload lowered batching.totalBatchMaxBytes below the message
		// while it waited for room: the error a send of that size gets
		// after the reload.
		err = fmt.Errorf("%w: %w", ErrBodyTooLarge, err)
	}
	if pd.handle != nil {
		t := pd.handle.Value()
		if t.failed != nil {
			t.failed.Inc()
		}
	}
	if pd.topic.latency != nil {
		pd.topic.latency.Observe(time.Since(pd.start).Seconds())
	}
	return shadowFailure(pd, sendFailure(ctx, pd, err))
}

// sendFailure words the error of a failed send in the caller's terms: was
// the message sent at all, and what happened to it. The errors beneath
// stay reachable with errors.Is and errors.As.
func sendFailure(ctx context.Context, pd *pending, err error) error {
	topic := pd.msg.Topic
	if ctx != nil && pd.attempts > 0 && ended(ctx) && cutByCaller(err) {
		// The request in flight ended with the caller's deadline (it
		// carries that deadline, and its own timer may fire a moment
		// before the caller's context says so): the broker may have
		// stored the message. This is the caller's deadline, not a
		// broker's timeout.
		ctxErr := ctx.Err()
		if ctxErr == nil {
			ctxErr = context.DeadlineExceeded
		}
		if pd.lastErr != nil {
			return &sendError{
				msg: fmt.Sprintf("producer: send to topic %q failed after %s: %v while waiting for the last answer, so the message may have been stored; failure before it: %v",
					topic, attempts(pd.attempts), ctxErr, pd.lastErr),
				errs: []error{ErrNoTarget, pd.lastErr, ctxErr},
			}
		}
		return &sendError{
			msg:  fmt.Sprintf("producer: send to topic %q: %v while waiting for the broker's answer; the message may have been stored", topic, ctxErr),
			errs: []error{ctxErr},
		}
	}
	ctxErr := contextError(err)
	if ctxErr == nil && ctx != nil && ctx.Err() != nil && retryableError(err) {
		// The context ended the send before the retry this failure would
		// have had: the caller's deadline is the reason it failed.
		ctxErr = ctx.Err()
		return &sendError{
			msg:  fmt.Sprintf("producer: send to topic %q failed after %s (%v): %v", topic, attempts(pd.attempts), ctxErr, err),
			errs: []error{err, ctxErr},
		}
	}
	var se *sendError
	switch {
	case errors.Is(err, batch.ErrNotSent) && !pd.sent:
		return &sendError{msg: fmt.Sprintf("producer: send to topic %q not sent: %v", topic, ctxErr), errs: []error{err}}
	case errors.Is(err, batch.ErrNotSent):
		return &sendError{
			msg: fmt.Sprintf("producer: send to topic %q failed after %s; the last was not sent (%v); failure before it: %v",
				topic, attempts(pd.attempts), ctxErr, pd.lastErr),
			errs: []error{err, pd.lastErr},
		}
	case errors.Is(err, ErrBufferFull):
		return &sendError{
			msg:  fmt.Sprintf("producer: send to topic %q not sent: the buffers hold batching.totalBatchMaxBytes already (WithFailFast)", topic),
			errs: []error{err},
		}
	case errors.As(err, &se) && errors.Is(err, ErrNoTarget) && pd.attempts == 0:
		return &sendError{msg: fmt.Sprintf("producer: send to topic %q not sent: %s", topic, se.msg), errs: []error{err}}
	case errors.As(err, &se) && errors.Is(err, ErrNoTarget):
		return &sendError{msg: fmt.Sprintf("producer: send to topic %q failed after %s: %s", topic, attempts(pd.attempts), se.msg), errs: []error{err}}
	case ctxErr != nil:
		return &sendError{
			msg: fmt.Sprintf("producer: send to topic %q: %v while waiting for the broker's answer; the message may have been stored",
				topic, ctxErr),
			errs: []error{err},
		}
	case errors.Is(err, ErrClosed):
		return &sendError{msg: fmt.Sprintf("producer: send to topic %q: %v", topic, err), errs: []error{err}}
	}
	return &sendError{msg: fmt.Sprintf("producer: send to topic %q failed after %s: %v", topic, attempts(pd.attempts), err), errs: []error{err}}
}

// ended reports whether ctx is over: done, or past its deadline (a timer
// of a context derived with the same deadline may fire first).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// cutByCaller reports whether err is how a request in flight ends when
// its deadline, the caller's, passes: a timeout or a context error, not
// a send withdrawn before it went out.
func cutByCaller(err error) bool {
	if errors.Is(err, batch.ErrNotSent) || errors.Is(err, ErrNoTarget) {
		return false
	}
	return errors.Is(err, ErrTimeout) || contextError(err) != nil
}

// contextError returns the context error err wraps, if any.
func contextError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return context.Canceled
	}
	return nil
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// dispatch picks a target, waiting for one as long as the send's context
// allows, and starts one attempt of an asynchronous send. held, when not
// nil, gives back bytes of the cap held while waiting; they are given back
// just before the attempt takes them again.
func (p *Producer) dispatch(pd *pending, held func()) {
	t, q, err := p.pick(pd.ctx, pd)
	if held != nil {
		held()
	}
	if err != nil {
		p.asyncFinish(pd, nil, p.fail(pd.ctx, pd, err))
		return
	}
	p.attempt(pd, t, q)
}

// attempt starts one attempt of an asynchronous send on target t, queue q:
// into the accumulator, or alone, in the background once the message's
// bytes are reserved. A FIFO message that goes alone waits in its group's
// line (see fifoLines), so that a group has one request in flight.
func (p *Producer) attempt(pd *pending, t *brokerTarget, q int32) {
	key := batchKey{t, q, pd.msg.MessageGroup}
	if p.settings.Load().batching && pd.msg.DeliveryTime.IsZero() {
		if err := p.acc.AddAsync(pd.ctx, key, pd, pd.size, pd.onDone); err != nil {
			p.asyncOutcome(pd, driver.SendResult{}, err)
		}
		return
	}
	release, err := p.acc.Reserve(pd.ctx, pd.size)
	if err != nil {
		p.asyncOutcome(pd, driver.SendResult{}, err)
		return
	}
	if key.group != "" {
		p.lines.add(p, key, &lineItem{pd: pd, release: release})
		return
	}
	go func() {
		r, err := p.sendAlone(pd.ctx, t, q, pd)
		release()
		p.asyncOutcome(pd, r, err)
	}()
}

// asyncOutcome handles the outcome of one attempt of an asynchronous send.
// It may run on a flushing goroutine, so a retry continues on a goroutine
// of its own: picking may pause and adding may wait for buffer space.
func (p *Producer) asyncOutcome(pd *pending, r driver.SendResult, err error) {
	t := pd.handle.Value()
	if err == nil {
		p.asyncFinish(pd, p.succeed(pd, t, r), nil)
		return
	}
	if p.retryable(pd.ctx, pd, err) {
		go p.dispatch(pd, nil)
		return
	}
	p.asyncFinish(pd, nil, p.fail(pd.ctx, pd, err))
}

func (p *Producer) asyncFinish(pd *pending, r *SendResult, err error) {
	pd.cancel()
	defer p.leave()
	pd.cb(r, err)
}
