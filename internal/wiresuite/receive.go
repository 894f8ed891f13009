package wiresuite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
)

// reader receives one topic for one consumer client from every broker of
// the topic's route: servers pop from all queues of the broker a receive
// names, so one queue per broker covers the topic.
type reader struct {
	s      *suite
	c      *driver.Client
	topic  string
	filter driver.Filter
	queues []driver.Queue
}

func (s *suite) reader(ctx context.Context, t *testing.T, c *driver.Client, topic string, filter driver.Filter) *reader {
	t.Helper()
	r := s.route(ctx, t, c, topic)
	seen := map[string]bool{}
	rd := &reader{s: s, c: c, topic: topic, filter: filter}
	for _, q := range r.ReadableQueues() {
		if seen[q.Broker] {
			continue
		}
		seen[q.Broker] = true
		rd.queues = append(rd.queues, q)
	}
	return rd
}

// delivery is one received message with the time the receive that brought
// it was started (the server popped it at that time or later).
type delivery struct {
	*driver.ReceivedMessage
	asked time.Time
}

// receive asks every broker once, holding each poll for the backend's
// shortest long poll, and returns what came.
func (r *reader) receive(ctx context.Context, t *testing.T, invisible time.Duration) []delivery {
	t.Helper()
	var out []delivery
	for _, q := range r.queues {
		asked := time.Now()
		msgs, err := r.c.Receive(ctx, driver.ReceiveRequest{
			Queue: q, Filter: r.filter, BatchSize: 32,
			InvisibleDuration: invisible, LongPollingTimeout: r.s.b.MinLongPolling,
		})
		if ctx.Err() != nil {
			return out
		}
		require.NoError(t, err, "receive %s from %s", r.topic, q.Endpoint)
		for _, m := range msgs {
			require.NoError(t, m.Err, "message %s arrived corrupted", m.ID)
			require.Equal(t, r.topic, m.Topic)
			out = append(out, delivery{ReceivedMessage: m, asked: asked})
		}
	}
	return out
}

// until receives until done returns true for what has arrived so far (each
// delivery is passed once to onEach before) or ctx ends, which fails the
// test with what is missing.
func (r *reader) until(ctx context.Context, t *testing.T, invisible time.Duration,
	onEach func(delivery), done func() bool, missing func() string) {
	t.Helper()
	for !done() {
		if ctx.Err() != nil {
			t.Fatalf("%s: gave up waiting on topic %s: %s", r.s.b.Name, r.topic, missing())
		}
		for _, d := range r.receive(ctx, t, invisible) {
			onEach(d)
		}
	}
}

// ack acknowledges deliveries at the endpoints they came from.
func (r *reader) ack(ctx context.Context, t *testing.T, ds ...delivery) {
	t.Helper()
	for _, d := range ds {
		errs, err := r.c.Ack(ctx, d.Endpoint, r.topic, []driver.AckEntry{{MessageID: d.ID, ReceiptHandle: d.ReceiptHandle}})
		require.NoError(t, err, "ack %s", d.ID)
		require.Len(t, errs, 1)
		require.NoError(t, errs[0], "ack %s", d.ID)
	}
}

// send sends msgs in one request to the first writable queue of topic and
// requires every message to succeed.
func (s *suite) send(ctx context.Context, t *testing.T, p *driver.Client, topic string, msgs ...*driver.Message) []driver.SendResult {
	t.Helper()
	r := s.route(ctx, t, p, topic)
	q := r.WritableQueues()[0]
	for _, m := range msgs {
		m.Topic = topic
		m.QueueID = q.ID
		if m.ID == "" {
			m.ID = p.NewMessageID()
		}
	}
	res, err := p.Send(ctx, q.Endpoint, msgs)
	require.NoError(t, err, "send to %s", topic)
	require.Len(t, res, len(msgs))
	for i, sr := range res {
		require.NoError(t, sr.Err, "message %d", i)
		require.Equal(t, msgs[i].ID, sr.MessageID) //nolint:gosec // G602: require.Len above stops the test unless len(res) == len(msgs)
	}
	return res
}

// ids lists the ids of msgs.
func ids(msgs []*driver.Message) map[string]*driver.Message {
	out := make(map[string]*driver.Message, len(msgs))
	for _, m := range msgs {
		out[m.ID] = m
	}
	return out
}

// body makes a distinct body of n bytes for message i, binary included.
func body(tag string, i, n int) []byte {
	b := make([]byte, n)
	head := fmt.Sprintf("%s-%d:", tag, i)
	copy(b, head)
	for j := len(head); j < n; j++ {
		b[j] = byte(j*7 + i)
	}
	return b
}

// notBeforeInvisible fails when d is a redelivery that arrived before the
// invisible time of the delivery it follows (prev, received in a call
// started at prev.asked) could have ended.
func (s *suite) notBeforeInvisible(t *testing.T, prev delivery, invisible time.Duration, d delivery) {
	t.Helper()
	if received := time.Now(); received.Before(prev.asked.Add(invisible)) {
		t.Fatalf("%s: message %s delivered again %v after the receive that hid it for %v",
			s.b.Name, d.ID, received.Sub(prev.asked), invisible)
	}
}
