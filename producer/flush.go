package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twinmq/twinmq/batch"
	"github.com/twinmq/twinmq/internal/driver"
)

// flush is the accumulator's flush function: one SendMessage request for a
// batch of one key. The accumulator's ctx ends only when Close gives up;
// each request is bounded by timeouts.request, and by its senders' contexts:
// a lone message's request ends with its send's context (a synchronous
// sender whose batch runs in place waits for nothing longer), and a batch's
// with the latest deadline of its messages, when that comes first.
func (p *Producer) flush(ctx context.Context, key batchKey, items []*pending, results []batch.Result[driver.SendResult]) error {
	if key.group == "" {
		items[0].topic.spread.observe(len(items), time.Now())
	}
	if len(items) == 1 && items[0].ctx != nil {
		// The accumulator's ctx is left out: when Close gives up it
		// closes the clients, which ends this request as well.
		ctx = items[0].ctx
	} else if last, ok := latestDeadlineBefore(items, time.Now().Add(p.settings.Load().requestTimeout)); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, last)
		defer cancel()
	}
	scratch := p.getResults()
	defer p.putResults(scratch)
	res, err := p.request(ctx, key.target, key.queue, items, *scratch)
	if err != nil {
		return err
	}
	*scratch = res
	for i, r := range res {
		results[i] = batch.Result[driver.SendResult]{Value: r, Err: r.Err}
	}
	return nil
}

// latestDeadlineBefore returns the latest deadline of the items' sends when
// all of them end before limit; ok is false as soon as one ends later (the
// common case, which the first item usually settles) or has none.
func latestDeadlineBefore(items []*pending, limit time.Time) (last time.Time, ok bool) {
	for _, it := range items {
		if it.ctx == nil {
			return time.Time{}, false
		}
		d, has := it.ctx.Deadline()
		if !has || !d.Before(limit) {
			return time.Time{}, false
		}
		if d.After(last) {
			last = d
		}
	}
	return last, true
}

// sendAloneReserved is sendAlone for a synchronous send (ordinary or
// transactional), with its bytes counted against
// batching.totalBatchMaxBytes while it is in flight.
func (p *Producer) sendAloneReserved(ctx context.Context, t *brokerTarget, queue int32, pd *pending) (driver.SendResult, error) {
	release, err := p.acc.Reserve(ctx, pd.size)
	if err != nil {
		return driver.SendResult{}, err
	}
	defer release()
	return p.sendAlone(ctx, t, queue, pd)
}

// sendAlone sends one message in a request of its own: a delayed message
// (brokers apply the timer only to single messages), or any message when
// batching is off.
func (p *Producer) sendAlone(ctx context.Context, t *brokerTarget, queue int32, pd *pending) (driver.SendResult, error) {
	var one [1]driver.SendResult
	res, err := p.request(ctx, t, queue, []*pending{pd}, one[:0])
	if err != nil {
		return driver.SendResult{}, err
	}
	return res[0], res[0].Err
}

// getResults returns memory for the driver's results of one request,
// recycled by putResults once they were copied out.
func (p *Producer) getResults() *[]driver.SendResult {
	if r, ok := p.results.Get().(*[]driver.SendResult); ok {
		return r
	}
	return new([]driver.SendResult)
}

func (p *Producer) putResults(r *[]driver.SendResult) {
	if cap(*r) > maxPooledRequest {
		return
	}
	clear(*r)
	*r = (*r)[:0]
	p.results.Put(r)
}

// request sends items to t in one SendMessage call and reports the outcome
// to failover: one report per request, since the request is what succeeded
// or failed at that broker. The results are appended to into[:0].
func (p *Producer) request(ctx context.Context, t *brokerTarget, queue int32, items []*pending, into []driver.SendResult) ([]driver.SendResult, error) {
	st := p.settings.Load()
	requestTimeout := st.requestTimeout
	base, timeout := detach(ctx, requestTimeout)
	// bounded: the send's own deadline, not the request timeout, limits
	// this request.
	bounded := timeout < requestTimeout
	rq := p.getRequest(len(items))
	defer p.putRequest(rq)
	backing, msgs := rq.backing, rq.msgs
	for i, it := range items {
		m := it.msg
		backing[i] = driver.Message{
			Topic:        t.physical,
			Tag:          m.Tag,
			Keys:         m.Keys,
			ID:           it.id,
			Group:        m.MessageGroup,
			DeliveryTime: m.DeliveryTime,
			Properties:   it.props,
			Body:         m.Body,
			QueueID:      queue,
			TraceContext: it.trace,

			Transactional: it.transactional,
		}
		msgs[i] = &backing[i]
	}
	cctx, cancel := context.WithTimeout(base, timeout)
	deadline, _ := cctx.Deadline()
	start := time.Now()
	res, err := t.client.SendInto(cctx, t.endpoint, msgs, into)
	// The request's deadline passed: gRPC may report it as its own
	// DEADLINE_EXCEEDED status, a moment before cctx says so.
	expired := err != nil && (cctx.Err() != nil || !time.Now().Before(deadline))
	cancel()
	t.noteRequest(ctx, err, bounded, timeout)
	h := items[0].handle
	picker := items[0].topic.picker
	if err != nil {
		cut := expired || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
		if cut && !ended(ctx) && !bounded {
			// Our own request timeout, not the caller giving up: the
			// broker did not answer in time, which is its failure.
			err = fmt.Errorf("send to %s (%s) got no answer within %v: %w", t.endpoint, t.cluster, timeout, driver.ErrTimeout)
		} else if waited := time.Since(start); cut && st.slowRequest > 0 && waited >= st.slowRequest {
			// The senders gave up first, but only after the broker kept
			// them waiting for failover.slowRequest: count it against the
			// broker, or one that hangs would keep its share of senders
			// whose deadlines are all shorter than timeouts.request. The
			// senders get their context's error.
			picker.Failure(h, fmt.Errorf("send to %s (%s) got no answer within %v, when its senders gave up: %w",
				t.endpoint, t.cluster, waited.Round(time.Millisecond), driver.ErrTimeout))
			items[0].topic.unstick(h)
			return nil, err
		}
		switch {
		case errors.Is(err, driver.ErrUnavailable):
			// The endpoint cannot be reached at all (connection refused,
			// reset, no route): take it out until a probe reaches it, as
			// the official clients isolate such endpoints. Halving its
			// weight would keep sending it a share of the traffic, and
			// with sticky picks that share shrinks slowly.
			picker.Down(h, err)
			items[0].topic.unstick(h)
		case retryableError(err):
			picker.Failure(h, err)
			items[0].topic.unstick(h)
		}
		return nil, err
	}
	picker.Success(h, time.Since(start))
	return res, nil
}

// requestMsgs is the driver's view of a request's messages; the driver
// keeps no reference to them once Send returns, so they are recycled.
type requestMsgs struct {
	backing []driver.Message
	msgs    []*driver.Message
}

func (p *Producer) getRequest(n int) *requestMsgs {
	rq, ok := p.requests.Get().(*requestMsgs)
	if !ok {
		rq = new(requestMsgs)
	}
	rq.backing = slices.Grow(rq.backing[:0], n)[:n]
	rq.msgs = slices.Grow(rq.msgs[:0], n)[:n]
	return rq
}

// putRequest recycles rq without keeping the messages' bodies and
// properties reachable; an unusually large one is dropped.
func (p *Producer) putRequest(rq *requestMsgs) {
	if cap(rq.backing) > maxPooledRequest {
		return
	}
	clear(rq.backing)
	clear(rq.msgs)
	p.requests.Put(rq)
}

// maxPooledRequest bounds the messages of a recycled requestMsgs.
const maxPooledRequest = 1024
