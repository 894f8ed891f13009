package wiresuite

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
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
// first delivery attempt, store time, queue position), and ack succeeds.
func (s *suite) testReceiveAck(t *testing.T) {
	t.Parallel()
	ctx := s.ctx(t, 2*time.Minute)
	p := s.producer(t, TopicAck)
	const n = 3
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
	// One message alone, two in a batch: both paths must deliver intact.
	sent := time.Now()
	s.send(ctx, t, p, TopicAck, msgs[0])
	s.send(ctx, t, p, TopicAck, msgs[1:]...)

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
		require.Equal(t, m.Body, d.Body, "body of %s", m.ID)
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
	for _, ep := range slices.Sorted(maps.Keys(byEndpoint)) {
		errs, err := c.Ack(ctx, ep, TopicAck, byEndpoint[ep])
		require.NoError(t, err)
		for i, e := range errs {
			require.NoError(t, e, "ack entry %d", i)
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
	rd.ack(ctx, t, *again)
}

// testNack: ChangeInvisibleDuration to a short time returns a new receipt
// handle and brings the message back long before its original invisible
// time, with delivery attempt 2.
func (s *suite) testNack(t *testing.T) {
	t.Parallel()
	// Long enough that only the nack can explain a prompt return.
	invisible := max(s.b.MinInvisible, s.redeliveryWait(nackDelay)+5*time.Second)
	ctx := s.ctx(t, time.Minute+invisible+s.redeliveryWait(nackDelay))
	p := s.producer(t, TopicNack)
	m := &driver.Message{Tag: "nack", Body: []byte("nacked once")}
	s.send(ctx, t, p, TopicNack, m)

	c := s.consumer(t, GroupNack, driver.Filter{}, TopicNack)
	rd := s.reader(ctx, t, c, TopicNack, driver.Filter{})
	var first *delivery
	rd.until(ctx, t, invisible, func(d delivery) {
		if d.ID == m.ID {
			first = &d
		}
	}, func() bool { return first != nil }, func() string { return "the message never arrived" })
	require.Equal(t, int32(1), first.DeliveryAttempt)

	nacked := time.Now()
	handle, err := c.ChangeInvisibleDuration(ctx, first.Endpoint, TopicNack, first.ReceiptHandle, first.ID, nackDelay)
	require.NoError(t, err)
	require.NotEmpty(t, handle)
	require.NotEqual(t, first.ReceiptHandle, handle, "ChangeInvisibleDuration returns a new receipt handle")

	var again *delivery
	rd.until(ctx, t, invisible, func(d delivery) {
		if d.ID == m.ID {
			again = &d
		}
	}, func() bool { return again != nil }, func() string { return "the nacked message never came back" })
	require.True(t, time.Now().Before(first.asked.Add(invisible)),
		"the message must come back through the nack (after %v), before its original invisible time", time.Since(nacked))
	require.Equal(t, int32(2), again.DeliveryAttempt)
	require.Equal(t, m.Body, again.Body)
	rd.ack(ctx, t, *again)
}
