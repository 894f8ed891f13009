package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

// Default retry backoff when neither WithRetryBackoff nor the server's
// retry policy gives one: 1 s doubling to 60 s.
const (
	defaultBackoffInitial = time.Second
	defaultBackoffMax     = time.Minute
)

// outcomeKind is what became of one attempt at a message.
type outcomeKind int

const (
	// handled: a handler (here or at a forward target) succeeded: ack.
	handled outcomeKind = iota
	// failed: a handler returned an error or panicked: nack with backoff,
	// or dead-letter after the maximum attempts.
	failed
	// held: nobody could take the message, or a forward's outcome was
	// lost: leave it for redelivery without counting it as a failure of
	// the message.
	held
)

type outcome struct {
	kind outcomeKind
	err  error
}

// dispatch takes over a batch received from one broker. Unordered messages
// are processed each on its own goroutine (the handler slots bound how many
// handlers run); the messages of one message group of an ordered group are
// processed one after the other, in the order received.
func (c *Consumer) dispatch(bl *brokerLoop, msgs []*driver.ReceivedMessage, deadline time.Time) {
	ds := make([]*delivery, len(msgs))
	for i, m := range msgs {
		d := &delivery{bl: bl, raw: m, handle: m.ReceiptHandle, deadline: deadline,
			msg: newMessage(c.topic, bl.cr.name, m)}
		c.met.receivedFrom(bl.cr.name, m.DeliveryAttempt)
		if raw := m.Properties[lane.PropertyLane]; raw != d.msg.Lane {
			c.met.malformedLane()
			c.log.Warn("message has a malformed lane; handling it as base", zap.String("message_id", m.ID),
				zap.String("lane", raw))
		}
		c.tracker.add(d)
		ds[i] = d
	}
	c.received(bl, ds, deadline)
	if !c.opts.ordered && !bl.fifo() {
		for _, d := range ds {
			bl.cr.goWork(func() { c.processOne(d) })
		}
		return
	}
	var order []string
	seqs := map[string][]*delivery{}
	for _, d := range ds {
		g := d.raw.Group
		if g == "" {
			// Messages without a group carry no order among themselves.
			bl.cr.goWork(func() { c.processOne(d) })
			continue
		}
		if _, ok := seqs[g]; !ok {
			order = append(order, g)
		}
		seqs[g] = append(seqs[g], d)
	}
	for _, g := range order {
		seq := seqs[g]
		bl.cr.goWork(func() { c.processOrdered(seq) })
	}
}

// done ends a delivery's stay in the in-flight budget.
func (c *Consumer) done() { c.inflight.release(1) }

// processOne takes an unordered message through routing and its handler,
// then settles it.
func (c *Consumer) processOne(d *delivery) {
	defer c.done()
	if d.raw.Err != nil {
		c.undecodable(d)
		return
	}
	switch out := c.attempt(d); out.kind {
	case handled:
		c.ack(d)
	case failed:
		c.retryOrDeadLetter(d, out.err)
	case held:
		c.met.hold()
		c.nack(d, c.backoff(d.bl, int(d.raw.DeliveryAttempt)))
	}
}

// processOrdered handles the messages of one message group strictly in
// order. A failure is retried here, after the backoff and with the invisible
// time extended meanwhile, because letting a later message of the group
// run first would break the order; after the maximum attempts the message
// goes to the dead-letter topic and the group moves on, as RocketMQ's own
// clients do. A held message stops the group: it and every later message
// are nacked, and the broker, which serves an ordered queue by offset,
// redelivers them in order.
func (c *Consumer) processOrdered(seq []*delivery) {
	for i, d := range seq {
		if d.raw.Err != nil {
			c.undecodable(d)
			c.done()
			continue
		}
		// A retry gets a Message of its own, down to its body, keys and
		// properties, as received: the handler that failed may have kept
		// the one it was given (and go on using it), which the consumer
		// promises not to touch again. So the copy is taken before the
		// first run.
		pristine := d.msg.clone()
		attempt := d.msg.DeliveryAttempt
		for {
			out := c.attempt(d)
			if out.kind == handled {
				c.ack(d)
				break
			}
			if out.kind == held || d.bl.cr.ctx.Err() != nil {
				if out.kind == held {
					c.met.hold()
				}
				c.nackRest(seq[i:], c.backoff(d.bl, attempt))
				return
			}
			if attempt >= c.live.Load().maxAttempts {
				c.deadLetterAfter(d, attempt, out.err)
				break
			}
			if !sleep(c.workCtx, c.backoff(d.bl, attempt)) {
				c.nackRest(seq[i:], 0)
				return
			}
			attempt++
			d.msg, pristine = pristine, pristine.clone()
			d.msg.DeliveryAttempt = attempt
		}
		c.done()
	}
}

func (c *Consumer) nackRest(rest []*delivery, delay time.Duration) {
	for _, d := range rest {
		c.nack(d, delay)
		c.done()
	}
}

// undecodable dead-letters a message whose body failed its digest or could
// not be decoded: no handler can make sense of it and retrying cannot
// mend it, so it must not block its queue.
func (c *Consumer) undecodable(d *delivery) {
	if c.keepInOwnDeadLetters(d, d.raw.Err) {
		return
	}
	c.log.Error("message cannot be decoded; moving it to the dead-letter topic",
		zap.String("message_id", d.raw.ID), zap.String("cluster", d.bl.cr.name),
		zap.String("endpoint", d.bl.endpoint), zap.Error(d.raw.Err))
	c.deadLetter(d, dlqCorrupt)
}

// retryOrDeadLetter settles a failed unordered message: nacked with the
// backoff of its attempt, or dead-lettered once it had the group's maximum
// attempts.
func (c *Consumer) retryOrDeadLetter(d *delivery, err error) {
	attempt := int(d.raw.DeliveryAttempt)
	if attempt >= c.live.Load().maxAttempts {
		c.deadLetterAfter(d, attempt, err)
		return
	}
	c.nack(d, c.backoff(d.bl, attempt))
}

func (c *Consumer) deadLetterAfter(d *delivery, attempt int, err error) {
	if c.keepInOwnDeadLetters(d, err) {
		return
	}
	c.log.Warn("message failed its last attempt; moving it to the dead-letter topic",
		zap.String("message_id", d.raw.ID), zap.Int("attempt", attempt), zap.Error(err))
	c.deadLetter(d, dlqMaxAttempts)
}

// keepInOwnDeadLetters handles a message the consumer would dead-letter
// when the group reads its own dead-letter topic (replaying it): a copy
// forwarded there would be the very next message the group reads, at once
// and without end. The message stays where it is instead, nacked with the
// backoff of the group's last attempt, and comes back after it; it reports
// whether that was the case.
func (c *Consumer) keepInOwnDeadLetters(d *delivery, err error) bool {
	if d.bl.cr.physical != driver.DeadLetterTopic(c.group) {
		return false
	}
	c.log.Warn("message of the group's own dead-letter topic failed; it stays there and is delivered again after the backoff",
		zap.String("message_id", d.raw.ID), zap.Int32("attempt", d.raw.DeliveryAttempt), zap.Error(err))
	c.nack(d, c.backoff(d.bl, c.live.Load().maxAttempts))
	return true
}

// attempt routes a message once: to the handler here, or to the consumer
// of its lane.
func (c *Consumer) attempt(d *delivery) outcome {
	ls := c.live.Load()
	if c.lanes == nil || !ls.lanesOn {
		return c.handleLocal(d.msg)
	}
	return c.lanes.route(d, ls)
}

// handleLocal runs the handler here, within the concurrency limit.
func (c *Consumer) handleLocal(m *Message) outcome {
	if err := c.slots.acquire(c.workCtx); err != nil {
		return outcome{kind: held, err: err}
	}
	defer c.slots.release(1)
	if err := c.runHandler(c.workCtx, m); err != nil {
		return outcome{kind: failed, err: err}
	}
	return outcome{kind: handled}
}

// runHandler calls the handler with the message's lane in ctx, recovering
// a panic into an error wrapping ErrHandlerPanic.
func (c *Consumer) runHandler(ctx context.Context, m *Message) (err error) {
	ctx = lane.WithLane(ctx, m.Lane)
	// The topic a message came from decides the mark, not its property:
	// see shadow.go.
	m.Shadow = c.opts.shadowOf != ""
	ctx = lane.WithShadow(ctx, m.Shadow)
	ctx, hooked := c.handling(ctx, m)
	start := time.Now()
	defer func() {
		result := resultOK
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, r)
			result = resultPanic
			c.log.Error("handler panicked; the delivery counts as failed", zap.String("message_id", m.ID),
				zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
		} else if err != nil {
			result = resultError
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				result = resultCancel
			}
		}
		c.met.handlerRan(result, time.Since(start))
		if hooked != nil {
			hooked(err)
		}
	}()
	return c.handler(ctx, m)
}

// backoff is how long a failed (or held) message waits before its next
// delivery, by the attempt that failed.
func (c *Consumer) backoff(bl *brokerLoop, attempt int) time.Duration {
	if c.opts.backoff != nil {
		return max(c.opts.backoff(attempt), 0)
	}
	if d := bl.retryPolicy().Backoff(attempt); d > 0 {
		return d
	}
	d := defaultBackoffInitial
	for i := 1; i < attempt && d < defaultBackoffMax; i++ {
		d *= 2
	}
	return min(d, defaultBackoffMax)
}
