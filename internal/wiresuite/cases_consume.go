package wiresuite

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// nackDelay is how soon a nacked message is due again.
const nackDelay = time.Second

// redeliveryWait bounds the wait for a message due again after d.
func (s *suite) redeliveryWait(d time.Duration) time.Duration {
	return d + s.b.RedeliveryLag + 4*s.b.MinLongPolling
}

// missingIDs describes which of want have not arrived.
func missingIDs[V any](want map[string]*driver.Message, got map[string]V) string {
	var out []string
	for id := range want {
		if _, ok := got[id]; !ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return fmt.Sprintf("not received: %v", out)
}

// testReceiveAck: received messages carry what was sent (body, tag, keys,
// properties, id, born host) plus what the server adds (receipt handle,
// first delivery attempt, store time, queue position), and ack succeeds,
// also when repeated. One message has a body of exactly the protocol's
// limit (4 MiB), which must pass both ways through gRPC's message size
// limits of client and server.
func (s *suite) testReceiveAck(t *testing.T) {
	t.Parallel()
	ctx := s.ctx(t, 2*time.Minute)
	p := s.producer(t, TopicAck)
	const n = 4
	msgs := make([]*driver.Message, n)
	for i := range msgs {
		id := p.NewMessageID()
		msgs[i] = &driver.Message{
			ID: id, Tag: "tag-ack", Keys: []string{"key-" + id, fmt.Sprintf("n%d", i)},
			Properties: map[string]string{"color": "blue", "index": fmt.Sprint(i), "unicode": "grüße✓"},
			Body:       body("ack", i, 1+i*700),
			BornHost:   "wiresuite-host",
		}
	}
	msgs[n-1].Body = body("ack", n-1, maxBody)
	// One message alone, two in a batch, the largest alone: every path must
	// deliver intact.
	sent := time.Now()
	s.send(ctx, t, p, TopicAck, msgs[0])
	s.send(ctx, t, p, TopicAck, msgs[1:n-1]...)
	s.send(ctx, t, p, TopicAck, msgs[n-1])

	c := s.consumer(t, GroupAck, driver.Filter{}, TopicAck)
	rd := s.reader(ctx, t, c, TopicAck, driver.Filter{})
	want := ids(msgs)
	got := map[string]delivery{}
	rd.until(ctx, t, max(s.b.MinInvisible, 30*time.Second), func(d delivery) {
		if _, ok := want[d.ID]; ok {
			require.NotContains(t, got, d.ID, "message %s delivered twice within its invisible time", d.ID)
			got[d.ID] = d
		}
	}, func() bool { return len(got) == n }, func() string { return missingIDs(want, got) })

	for _, m := range msgs {
		d := got[m.ID]
		require.True(t, bytes.Equal(m.Body, d.Body), "body of %s: %d bytes received, %d sent", m.ID, len(d.Body), len(m.Body))
		require.Equal(t, m.Tag, d.Tag)
		require.ElementsMatch(t, m.Keys, d.Keys)
		for k, v := range m.Properties {
			require.Equal(t, v, d.Properties[k], "user property %q of %s", k, m.ID)
		}
		require.Equal(t, m.BornHost, d.BornHost)
		require.WithinDuration(t, sent, d.BornTime, time.Minute)
		require.False(t, d.StoreTime.IsZero(), "store time")
		require.Equal(t, driver.TypeNormal, d.Type)
		require.Equal(t, int32(1), d.DeliveryAttempt, "first delivery")
		require.NotEmpty(t, d.ReceiptHandle)
		require.NotEmpty(t, d.Endpoint)
		require.GreaterOrEqual(t, d.QueueOffset, int64(0))
		require.Nil(t, d.DeadLetter)
	}
	// One ack call with every entry.
	byEndpoint := map[string][]driver.AckEntry{}
	for _, d := range got {
		byEndpoint[d.Endpoint] = append(byEndpoint[d.Endpoint], driver.AckEntry{MessageID: d.ID, ReceiptHandle: d.ReceiptHandle})
	}
	// Twice: a retried ack of acked messages is OK, as on the proxy.
	for round := range 2 {
		for _, ep := range slices.Sorted(maps.Keys(byEndpoint)) {
			errs, err := c.Ack(ctx, ep, TopicAck, byEndpoint[ep])
			require.NoError(t, err, "ack round %d", round+1)
			for i, e := range errs {
				require.NoError(t, e, "ack round %d, entry %d", round+1, i)
			}
		}
	}
}

// testRedelivery: of two received messages, the acked one never comes
// back; the other one comes back after its invisible time (not before),
// with delivery attempt 2, and its new receipt handle acks it.
func (s *suite) testRedelivery(t *testing.T) {
	t.Parallel()
	invisible := s.b.MinInvisible
	ctx := s.ctx(t, time.Minute+3*s.redeliveryWait(invisible))
	p := s.producer(t, TopicRedeliver)
	acked := &driver.Message{Tag: "redeliver", Body: []byte("acked at once")}
	kept := &driver.Message{Tag: "redeliver", Body: []byte("left unacked")}
	s.send(ctx, t, p, TopicRedeliver, acked, kept)

	c := s.consumer(t, GroupRedeliver, driver.Filter{}, TopicRedeliver)
	rd := s.reader(ctx, t, c, TopicRedeliver, driver.Filter{})
	want := ids([]*driver.Message{acked, kept})
	first := map[string]delivery{}
	rd.until(ctx, t, invisible, func(d delivery) {
		if _, ok := want[d.ID]; !ok {
			return
		}
		if prev, ok := first[d.ID]; ok {
			s.notBeforeInvisible(t, prev, invisible, d)
			return // came back before the other one arrived: still fine, checked below
		}
		require.Equal(t, int32(1), d.DeliveryAttempt)
		first[d.ID] = d
	}, func() bool { return len(first) == 2 }, func() string { return missingIDs(want, first) })
	rd.ack(ctx, t, first[acked.ID])

	var again *delivery
	rd.until(ctx, t, s.b.MinInvisible*3, func(d delivery) {
		switch d.ID {
		case acked.ID:
			t.Fatalf("%s: acked message %s was delivered again (attempt %d)", s.b.Name, d.ID, d.DeliveryAttempt)
		case kept.ID:
			s.notBeforeInvisible(t, first[kept.ID], invisible, d)
			again = &d
		}
	}, func() bool { return again != nil }, func() string { return "the unacked message never came back" })
	require.Equal(t, int32(2), again.DeliveryAttempt, "a redelivery counts the attempt")
	require.Equal(t, kept.Body, again.Body)
	require.NotEqual(t, first[kept.ID].ReceiptHandle, again.ReceiptHandle, "a redelivery has a new receipt handle")
	// The first handle's invisible time is over: the proxy refuses it.
	s.ackCode(ctx, t, c, *again, first[kept.ID].ReceiptHandle, rmqpb.Code_INVALID_RECEIPT_HANDLE,
		"ack with the expired handle of an earlier delivery")
	rd.ack(ctx, t, *again)
}

// testNack: ChangeInvisibleDuration to a short time returns a new receipt
// handle and brings the message back long before its original invisible
// time, with delivery attempt 2. It also pins down what old handles do,
// as the real proxy answers: one replaced by the change, still within its
// own invisible time, acks OK but acks nothing (the message comes back,
// twice); one past its invisible time is INVALID_RECEIPT_HANDLE; acking an
// acked message again, and changing it after the ack, are OK.
func (s *suite) testNack(t *testing.T) {
	t.Parallel()
	// Long enough that only the nack can explain a prompt return, and that
	// the first handle stays unexpired through two nack round trips.
	invisible := max(s.b.MinInvisible, 3*s.redeliveryWait(nackDelay)+10*time.Second)
	ctx := s.ctx(t, 2*time.Minute+3*s.redeliveryWait(nackDelay))
	p := s.producer(t, TopicNack)
	m := &driver.Message{Tag: "nack", Body: []byte("nacked twice")}
	s.send(ctx, t, p, TopicNack, m)

	c := s.consumer(t, GroupNack, driver.Filter{}, TopicNack)
	rd := s.reader(ctx, t, c, TopicNack, driver.Filter{})
	next := func(what string) delivery {
		var got *delivery
		rd.until(ctx, t, invisible, func(d delivery) {
			if d.ID == m.ID {
				got = &d
			}
		}, func() bool { return got != nil }, func() string { return what })
		return *got
	}
	first := next("the message never arrived")
	require.Equal(t, int32(1), first.DeliveryAttempt)

	nacked := time.Now()
	handle, err := c.ChangeInvisibleDuration(ctx, first.Endpoint, TopicNack, first.ReceiptHandle, first.ID, nackDelay)
	require.NoError(t, err)
	require.NotEmpty(t, handle)
	require.NotEqual(t, first.ReceiptHandle, handle, "ChangeInvisibleDuration returns a new receipt handle")
	// The replaced handle: OK, and (below) the message still comes back.
	s.ackCode(ctx, t, c, first, first.ReceiptHandle, rmqpb.Code_OK, "ack with the handle a change replaced")

	again := next("the nacked message never came back (did the ack with the replaced handle ack it?)")
	require.True(t, time.Now().Before(first.asked.Add(invisible)),
		"the message must come back through the nack (after %v), before its original invisible time", time.Since(nacked))
	require.Equal(t, int32(2), again.DeliveryAttempt)
	require.Equal(t, m.Body, again.Body)
	// The handle from the change expired with the nack's invisible time.
	s.ackCode(ctx, t, c, first, handle, rmqpb.Code_INVALID_RECEIPT_HANDLE, "ack with the expired handle of the nack")
	// The first handle, still within its invisible time, must not ack this
	// newer delivery: nack it once more and it comes back a third time.
	s.ackCode(ctx, t, c, first, first.ReceiptHandle, rmqpb.Code_OK, "ack with a handle older than the message's current delivery")
	_, err = c.ChangeInvisibleDuration(ctx, again.Endpoint, TopicNack, again.ReceiptHandle, again.ID, nackDelay)
	require.NoError(t, err, "nack of the second delivery")
	third := next("the message never came back a third time: an old handle acked a newer delivery")
	require.Equal(t, int32(3), third.DeliveryAttempt)

	rd.ack(ctx, t, third)
	// Idempotent: a retried ack, and a change after the ack, are OK.
	s.ackCode(ctx, t, c, third, third.ReceiptHandle, rmqpb.Code_OK, "second ack of an acked message")
	_, err = c.ChangeInvisibleDuration(ctx, third.Endpoint, TopicNack, third.ReceiptHandle, third.ID, invisible)
	require.NoError(t, err, "ChangeInvisibleDuration after the ack")
}

// ackCode acks d's message with handle and requires the entry's status code
// want (OK as no error).
func (s *suite) ackCode(ctx context.Context, t *testing.T, c *driver.Client, d delivery, handle string, want rmqpb.Code, what string) {
	t.Helper()
	errs, err := c.Ack(ctx, d.Endpoint, d.Topic, []driver.AckEntry{{MessageID: d.ID, ReceiptHandle: handle}})
	if err == nil {
		require.Len(t, errs, 1)
		err = errs[0]
	}
	if want == rmqpb.Code_OK {
		require.NoError(t, err, "%s: %s", s.b.Name, what)
		return
	}
	requireCode(t, want, err, s.b.Name+": "+what)
}
