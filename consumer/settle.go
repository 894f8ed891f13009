package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/driver"
)

// delivery is one received message from receipt until it is settled: acked,
// nacked (made visible again later) or moved to the dead-letter topic.
type delivery struct {
	bl  *brokerLoop
	raw *driver.ReceivedMessage
	msg *Message

	// mu guards the receipt handle, which every ChangeInvisibleDuration
	// replaces. A renewal holds it during its call, so a settle that
	// follows uses the newest handle.
	mu       sync.Mutex
	handle   string
	deadline time.Time // when the broker makes it visible again, as far as we know
	done     bool

	renewing atomic.Bool
}

// tracker keeps the unsettled deliveries and extends their invisible time
// while they wait for a handler, run one, or are forwarded: a slow handler
// never has its message redelivered to someone else underneath it.
type tracker struct {
	c  *Consumer
	mu sync.Mutex
	ds map[*delivery]struct{}
	// wg counts the renewal loop and the renewals it started; the
	// consumer's Close waits for it (the renewals' contexts end with the
	// consumer's work, so the wait is bounded).
	wg sync.WaitGroup
}

func newTracker(c *Consumer) *tracker {
	return &tracker{c: c, ds: map[*delivery]struct{}{}}
}

func (t *tracker) add(d *delivery) {
	t.mu.Lock()
	t.ds[d] = struct{}{}
	t.mu.Unlock()
}

func (t *tracker) remove(d *delivery) {
	t.mu.Lock()
	delete(t.ds, d)
	t.mu.Unlock()
}

// start runs the renewal loop until stop is closed; wait waits for it and
// for every renewal it started.
func (t *tracker) start(stop <-chan struct{}) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.run(stop)
	}()
}

func (t *tracker) wait() { t.wg.Wait() }

// run renews until stop is closed (after Close has settled everything);
// it checks a sixth of the invisible time apart and renews what has less
// than two thirds of it left, so a renewal has half the invisible time to
// complete before the broker would give the message away.
func (t *tracker) run(stop <-chan struct{}) {
	inv := t.c.opts.invisible
	tick := min(max(inv/6, 10*time.Millisecond), 5*time.Second)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			t.renewDue(inv)
		}
	}
}

func (t *tracker) renewDue(inv time.Duration) {
	now := time.Now()
	// Copy first: a delivery's lock is never taken under the tracker's,
	// since settling takes them the other way round.
	t.mu.Lock()
	all := make([]*delivery, 0, len(t.ds))
	for d := range t.ds {
		all = append(all, d)
	}
	t.mu.Unlock()
	var due []*delivery
	for _, d := range all {
		if d.renewing.Load() || !d.mu.TryLock() {
			continue // being renewed or settled right now
		}
		if !d.done && d.deadline.Sub(now) < inv*2/3 {
			due = append(due, d)
		}
		d.mu.Unlock()
	}
	for _, d := range due {
		d.renewing.Store(true)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer d.renewing.Store(false)
			t.c.renew(d)
		}()
	}
}

// renew extends one delivery's invisible time.
func (c *Consumer) renew(d *delivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(c.workCtx, c.live.Load().requestTimeout)
	h, err := d.bl.cr.client.ChangeInvisibleDuration(ctx, d.bl.endpoint, d.bl.cr.physical, d.handle, d.raw.ID, c.opts.invisible)
	cancel()
	if err != nil {
		c.met.settleError("renew")
		c.log.Warn("could not extend a message's invisible time; it may be redelivered while it is handled",
			zap.String("message_id", d.raw.ID), zap.String("endpoint", d.bl.endpoint), zap.Error(err))
		return
	}
	d.handle = h
	d.deadline = start.Add(c.opts.invisible)
}

// claim marks d settled and returns its newest handle; false when it was
// settled already.
func (c *Consumer) claim(d *delivery) (string, bool) {
	d.mu.Lock()
	if d.done {
		d.mu.Unlock()
		return "", false
	}
	d.done = true
	h := d.handle
	d.mu.Unlock()
	c.tracker.remove(d)
	return h, true
}

// ack acknowledges a delivery after its handler succeeded.
func (c *Consumer) ack(d *delivery) {
	h, ok := c.claim(d)
	if !ok {
		return
	}
	if err := d.bl.ack(c.workCtx, driver.AckEntry{MessageID: d.raw.ID, ReceiptHandle: h}); err != nil {
		c.met.settleError("ack")
		c.log.Warn("ack failed; the message will be delivered again", zap.String("message_id", d.raw.ID),
			zap.String("endpoint", d.bl.endpoint), zap.Error(err))
	}
}

// nack makes a delivery visible again after delay, so it is redelivered
// (with its delivery attempt counted up by the broker).
func (c *Consumer) nack(d *delivery, delay time.Duration) {
	h, ok := c.claim(d)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.workCtx, c.live.Load().requestTimeout)
	defer cancel()
	if _, err := d.bl.cr.client.ChangeInvisibleDuration(ctx, d.bl.endpoint, d.bl.cr.physical, h, d.raw.ID, delay); err != nil {
		// The message still comes back, at the end of its invisible time.
		c.met.settleError("nack")
		c.log.Warn("nack failed; the message comes back when its invisible time ends", zap.String("message_id", d.raw.ID),
			zap.String("endpoint", d.bl.endpoint), zap.Error(err))
	}
}

// deadLetter moves a delivery to the group's dead-letter topic. If the
// broker refuses, the message stays un-acked and comes back; the broker
// itself dead-letters it once its own maximum attempts are reached.
func (c *Consumer) deadLetter(d *delivery, reason string) {
	h, ok := c.claim(d)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.workCtx, c.live.Load().requestTimeout)
	defer cancel()
	err := d.bl.cr.client.ForwardToDeadLetterQueue(ctx, d.bl.endpoint, driver.DeadLetter{
		Topic: d.bl.cr.physical, ReceiptHandle: h, MessageID: d.raw.ID,
		DeliveryAttempt: d.raw.DeliveryAttempt, MaxDeliveryAttempts: int32(c.live.Load().maxAttempts),
	})
	if err != nil {
		c.met.settleError("dead_letter")
		c.log.Error("could not move a message to the dead-letter topic; it will be delivered again",
			zap.String("message_id", d.raw.ID), zap.String("reason", reason), zap.Error(err))
		return
	}
	c.met.deadLetter(reason)
}
