package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/clientstate"
	"github.com/twinmq/twinmq/internal/driver"
)

// brokerClient is the part of the RocketMQ driver the consumer uses. The
// driver's *Client is the implementation; unit tests substitute a fake to
// reach paths a real broker cannot be made to take on demand (a corrupted
// body, a handler panic at a given moment).
type brokerClient interface {
	Route(ctx context.Context, accessPoint, topic string) (*driver.Route, error)
	Receive(ctx context.Context, req driver.ReceiveRequest) ([]*driver.ReceivedMessage, error)
	Ack(ctx context.Context, endpoint, topic string, entries []driver.AckEntry) ([]error, error)
	ChangeInvisibleDuration(ctx context.Context, endpoint, topic, receiptHandle, messageID string, d time.Duration) (string, error)
	ForwardToDeadLetterQueue(ctx context.Context, endpoint string, d driver.DeadLetter) error
	ServerSettings(endpoint string) (driver.ServerSettings, bool)
	EndpointState(endpoint string) driver.EndpointState
	Close(ctx context.Context) error
}

// Intervals of the receive side.
const (
	// discoverInterval is how often a cluster's route is looked at for
	// brokers not yet received from (the driver caches and refreshes
	// routes, so a look is usually a map read).
	discoverInterval = 5 * time.Second
	// Backoff of a broker loop after a failed receive: throttling is
	// retried quickly, other failures (a stopped broker) slowly.
	throttleBackoff = 20 * time.Millisecond
	minFailBackoff  = 200 * time.Millisecond
	maxFailBackoff  = 5 * time.Second
	// ackBatch is the most acks sent in one AckMessage call.
	ackBatch = 64
	// ackWorkers per broker send acks concurrently.
	ackWorkers = 2
	// receiversPerBroker long polls run at once per broker, so the next
	// batch is on its way while the last one's answer travels back.
	receiversPerBroker = 4
)

// discover reads the route through the first access point that answers
// and starts a receive loop for every broker without one. A broker that
// leaves the route keeps its loop: its messages must still be drained,
// and a loop on a dead broker only backs off.
func (cr *clusterRunner) discover(ctx context.Context) {
	c := cr.c
	var lastErr error
	for _, ap := range cr.accessPoints {
		rctx, cancel := context.WithTimeout(ctx, c.live.Load().requestTimeout)
		route, err := cr.client.Route(rctx, ap, cr.physical)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		cr.link.Succeeded()
		cr.mu.Lock()
		for _, q := range route.ReadableQueues() {
			// A RocketMQ proxy serves every broker of its cluster at one
			// endpoint and pops from the broker the queue names, so a
			// broker is its name at its endpoint.
			key := q.Broker + "@" + q.Endpoint
			if _, ok := cr.brokers[key]; ok || cr.ctx.Err() != nil {
				continue
			}
			bl := &brokerLoop{cr: cr, queue: q, endpoint: q.Endpoint}
			cr.brokers[key] = bl
			c.log.Info("receiving from broker", zap.String("cluster", cr.name), zap.String("broker", q.Broker),
				zap.String("endpoint", q.Endpoint))
			for range receiversPerBroker {
				cr.goLoop(bl.run)
			}
		}
		cr.mu.Unlock()
		return
	}
	if lastErr != nil && ctx.Err() == nil {
		now := time.Now()
		_, refused := clientstate.RefusalOf(lastErr, now)
		switch {
		case cr.link.Failed(lastErr, now):
			// The servers refuse this consumer itself (a group they do
			// not know, credentials they reject): said once at Error,
			// then at Debug while it lasts.
			c.log.Error("the cluster refuses this consumer; check its group, topic and credentials",
				zap.String("cluster", cr.name), zap.Error(lastErr))
		case refused:
			c.log.Debug("the cluster still refuses this consumer", zap.String("cluster", cr.name), zap.Error(lastErr))
		default:
			c.log.Warn("no route for the cluster yet; retrying", zap.String("cluster", cr.name), zap.Error(lastErr))
		}
	}
}

// brokerLoop long-polls one broker and hands what it gets to dispatch.
type brokerLoop struct {
	cr       *clusterRunner
	queue    driver.Queue
	endpoint string
	acks     acker
	// link is the state of the broker's receives, shared by its receive
	// loops: a lasting refusal is logged once, and State reads it.
	link clientstate.Link
}

func (bl *brokerLoop) run() {
	c := bl.cr.c
	ctx := bl.cr.ctx
	attemptID := newAttemptID()
	failWait := time.Duration(0)
	for ctx.Err() == nil {
		free, err := c.inflight.waitFree(ctx)
		if err != nil {
			return
		}
		n := min(free, c.opts.batchSize)
		start := time.Now()
		msgs, err := bl.cr.client.Receive(ctx, driver.ReceiveRequest{
			Queue:              bl.queue,
			Filter:             driver.Filter{Type: driver.FilterTag, Expression: c.opts.filter},
			BatchSize:          n,
			InvisibleDuration:  c.opts.invisible,
			LongPollingTimeout: c.opts.polling,
			AttemptID:          attemptID,
		})
		c.inflight.take(len(msgs))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := throttleBackoff
			if !errors.Is(err, driver.ErrTooManyRequests) {
				failWait = min(max(2*failWait, minFailBackoff), maxFailBackoff)
				wait = failWait
				fields := []zap.Field{zap.String("cluster", bl.cr.name), zap.String("endpoint", bl.endpoint),
					zap.Duration("retry_in", wait), zap.Error(err)}
				switch {
				case bl.link.Failed(err, time.Now()):
					// The broker refuses the request itself (settings
					// below its floors, a forbidden group): retrying will
					// not mend it, so say so where an operator looks.
					c.log.Error("the broker refuses to deliver to this consumer; check its settings", fields...)
				case driver.Retryable(err):
					c.log.Debug("receive failed", fields...)
				}
			}
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		failWait = 0
		bl.link.Succeeded()
		if len(msgs) == 0 {
			continue
		}
		// The attempt id makes a re-poll after a lost answer idempotent;
		// it is replaced only once an answer with messages arrived.
		attemptID = newAttemptID()
		c.dispatch(bl, msgs, start.Add(c.opts.invisible))
	}
}

// fifo reports whether the broker said the group consumes orderly.
func (bl *brokerLoop) fifo() bool {
	s, ok := bl.cr.client.ServerSettings(bl.endpoint)
	return ok && s.FIFO
}

// retryPolicy is the server's retry policy for the group, if it sent one.
func (bl *brokerLoop) retryPolicy() driver.RetryPolicy {
	s, _ := bl.cr.client.ServerSettings(bl.endpoint)
	return s.Retry
}

// acker gathers the acks of one broker into AckMessage calls. At most
// ackWorkers calls are in flight; acks that come while they are gather in
// the open batch, which the next free sender takes whole (up to ackBatch),
// so the number of calls adapts to the load without a timer. A handler's
// goroutine appends under a mutex and waits on its batch's channel: no
// channel or goroutine per message.
type acker struct {
	mu      sync.Mutex
	open    []*ackCall // batches not yet taken by a sender, oldest first
	senders int        // sender goroutines running
}

// ackCall is one AckMessage call: the entries it carries and, once done is
// closed, one result per entry.
type ackCall struct {
	entries []driver.AckEntry
	errs    []error
	done    chan struct{}
}

// ack queues one ack for this broker and waits for its result.
func (bl *brokerLoop) ack(ctx context.Context, e driver.AckEntry) error {
	if isClosed(bl.cr.stopAck) || isClosed(bl.cr.c.stopAck) {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a := &bl.acks
	a.mu.Lock()
	var call *ackCall
	if n := len(a.open); n > 0 && len(a.open[n-1].entries) < ackBatch {
		call = a.open[n-1]
	} else {
		call = &ackCall{entries: make([]driver.AckEntry, 0, ackBatch), done: make(chan struct{})}
		a.open = append(a.open, call)
	}
	i := len(call.entries)
	call.entries = append(call.entries, e)
	start := a.senders < ackWorkers
	if start {
		a.senders++
	}
	a.mu.Unlock()
	if start {
		go bl.sendLoop()
	}
	<-call.done
	return call.errs[i]
}

// sendLoop sends open batches until none is left.
func (bl *brokerLoop) sendLoop() {
	a := &bl.acks
	for {
		a.mu.Lock()
		if len(a.open) == 0 {
			a.senders--
			a.mu.Unlock()
			return
		}
		call := a.open[0]
		a.open[0] = nil
		a.open = a.open[1:]
		a.mu.Unlock()
		call.errs = bl.sendAcks(call.entries)
		close(call.done)
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sendAcks acks entries, retrying the whole call on a failure a retry can
// mend (a broker that is briefly unreachable): a lost ack means a
// redelivery, which is allowed but costs a second handling.
func (bl *brokerLoop) sendAcks(entries []driver.AckEntry) []error {
	c := bl.cr.c
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		ctx, cancel := context.WithTimeout(c.workCtx, c.live.Load().requestTimeout)
		var err error
		errs, err = bl.cr.client.Ack(ctx, bl.endpoint, bl.cr.physical, entries)
		cancel()
		if err == nil || !driver.Retryable(err) || !sleep(c.workCtx, time.Duration(attempt+1)*100*time.Millisecond) {
			break
		}
	}
	if len(errs) != len(entries) {
		errs = make([]error, len(entries))
	}
	return errs
}

func newAttemptID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sleep waits d or until ctx ends; it reports whether the full time passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
