package wiresuite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
)

// awaitDeadLetter polls the origin topic (a message must not come back
// there; on a real proxy it is also the receive that moves an exhausted
// message to the dead-letter topic) and the dead-letter topic until the
// message with id shows up in the latter, and acks it there.
func (s *suite) awaitDeadLetter(ctx context.Context, t *testing.T, origin, dead *reader, id string, invisible time.Duration) delivery {
	t.Helper()
	for {
		if ctx.Err() != nil {
			t.Fatalf("%s: message %s never reached %s", s.b.Name, id, dead.topic)
		}
		for _, d := range origin.receive(ctx, t, invisible) {
			if d.ID == id {
				t.Fatalf("%s: message %s was delivered again on %s (attempt %d) instead of going to %s",
					s.b.Name, id, origin.topic, d.DeliveryAttempt, dead.topic)
			}
		}
		for _, d := range dead.receive(ctx, t, invisible) {
			if d.ID == id {
				dead.ack(ctx, t, d)
				return d
			}
		}
	}
}

// testDeadLetterAfterMaxAttempts: a group announces its maximum attempts;
// a message nacked on every delivery is delivered exactly that many times,
// counting 1, 2, ..., and then lands in the group's dead-letter topic,
// readable like any topic, with its id and body.
func (s *suite) testDeadLetterAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	invisible := max(s.b.MinInvisible, s.redeliveryWait(nackDelay)+5*time.Second)
	ctx := s.ctx(t, 2*time.Minute+2*DLQMaxAttempts*s.redeliveryWait(nackDelay))
	p := s.producer(t, TopicDLQ)
	m := &driver.Message{Tag: "dlq", Keys: []string{"dead"}, Body: body("dlq", 0, 64),
		Properties: map[string]string{"reason": "always nacked"}}
	s.send(ctx, t, p, TopicDLQ, m)

	c := s.consumer(t, GroupDLQ, driver.Filter{}, TopicDLQ)
	rd := s.reader(ctx, t, c, TopicDLQ, driver.Filter{})
	var attempts []int32
	rd.until(ctx, t, invisible, func(d delivery) {
		if d.ID != m.ID {
			return
		}
		attempts = append(attempts, d.DeliveryAttempt)
		if len(attempts) > DLQMaxAttempts {
			return // reported below
		}
		_, err := c.ChangeInvisibleDuration(ctx, d.Endpoint, TopicDLQ, d.ReceiptHandle, d.ID, nackDelay)
		require.NoError(t, err, "nack attempt %d", d.DeliveryAttempt)
	}, func() bool { return len(attempts) >= DLQMaxAttempts }, func() string {
		return "the message was not delivered as often as the group allows"
	})
	want := make([]int32, DLQMaxAttempts)
	for i := range want {
		want[i] = int32(i + 1)
	}
	require.Equal(t, want, attempts, "delivery attempts before the dead-letter topic")
	ss, ok := c.ServerSettings(rd.queues[0].Endpoint)
	require.True(t, ok, "settings echo")
	require.Equal(t, DLQMaxAttempts, ss.Retry.MaxAttempts, "the server announces the group's maximum attempts")

	dc := s.consumer(t, GroupDLQReader, driver.Filter{}, driver.DeadLetterTopic(GroupDLQ))
	drd := s.reader(ctx, t, dc, driver.DeadLetterTopic(GroupDLQ), driver.Filter{})
	dead := s.awaitDeadLetter(ctx, t, rd, drd, m.ID, invisible)
	// The proxy counts the pop that found the attempts used up, and the
	// move itself: attempts made + 2.
	s.checkDeadLetter(t, m, dead, TopicDLQ, DLQMaxAttempts+2)
}

// testForwardToDeadLetterQueue: ForwardMessageToDeadLetterQueue moves a
// received message to the group's dead-letter topic at once, whatever its
// attempt count.
func (s *suite) testForwardToDeadLetterQueue(t *testing.T) {
	t.Parallel()
	invisible := max(s.b.MinInvisible, 30*time.Second)
	ctx := s.ctx(t, 2*time.Minute+s.redeliveryWait(s.b.MinLongPolling))
	p := s.producer(t, TopicForward)
	m := &driver.Message{Tag: "fwd", Keys: []string{"forwarded"}, Body: body("fwd", 0, 80),
		Properties: map[string]string{"reason": "poison"}}
	s.send(ctx, t, p, TopicForward, m)

	c := s.consumer(t, GroupForward, driver.Filter{}, TopicForward)
	rd := s.reader(ctx, t, c, TopicForward, driver.Filter{})
	var got *delivery
	rd.until(ctx, t, invisible, func(d delivery) {
		if d.ID == m.ID {
			got = &d
		}
	}, func() bool { return got != nil }, func() string { return "the message never arrived" })
	require.NoError(t, c.ForwardToDeadLetterQueue(ctx, got.Endpoint, driver.DeadLetter{
		Topic: TopicForward, ReceiptHandle: got.ReceiptHandle, MessageID: got.ID,
		DeliveryAttempt: got.DeliveryAttempt, MaxDeliveryAttempts: 17,
	}))

	dc := s.consumer(t, GroupDLQReader, driver.Filter{}, driver.DeadLetterTopic(GroupForward))
	drd := s.reader(ctx, t, dc, driver.DeadLetterTopic(GroupForward), driver.Filter{})
	dead := s.awaitDeadLetter(ctx, t, rd, drd, m.ID, invisible)
	s.checkDeadLetter(t, m, dead, TopicForward, int(got.DeliveryAttempt)+1)
}

// checkDeadLetter: a dead-lettered message keeps what was sent, and its
// first delivery from the dead-letter topic reports attempt, which carries
// the attempts made on the origin topic. Its dead-letter info is not
// asserted: the proxy leaves it unset, the embedded broker fills it in.
func (s *suite) checkDeadLetter(t *testing.T, sent *driver.Message, d delivery, origin string, attempt int) {
	t.Helper()
	require.Equal(t, int32(attempt), d.DeliveryAttempt, "delivery attempt read from the dead-letter topic of %s", origin)
	require.Equal(t, sent.Body, d.Body)
	require.Equal(t, sent.Tag, d.Tag)
	require.ElementsMatch(t, sent.Keys, d.Keys)
	for k, v := range sent.Properties {
		require.Equal(t, v, d.Properties[k], "user property %q", k)
	}
	t.Logf("%s: dead letter %s: topic %s, attempt %d, dead-letter info %+v", s.b.Name, d.ID, d.Topic, d.DeliveryAttempt, d.DeadLetter)
}

// testTagFilter: a receive with a tag expression gets only the matching
// messages; the others never reach this group.
func (s *suite) testTagFilter(t *testing.T) {
	t.Parallel()
	invisible := max(s.b.MinInvisible, 30*time.Second)
	ctx := s.ctx(t, 2*time.Minute)
	p := s.producer(t, TopicFilter)
	var keep []*driver.Message
	for i := range 4 {
		tag := "drop"
		if i%2 == 0 {
			tag = "keep"
		}
		m := &driver.Message{Tag: tag, Body: body(tag, i, 32)}
		s.send(ctx, t, p, TopicFilter, m)
		if tag == "keep" {
			keep = append(keep, m)
		}
	}
	filter := driver.Filter{Type: driver.FilterTag, Expression: "keep"}
	c := s.consumer(t, GroupFilter, filter, TopicFilter)
	rd := s.reader(ctx, t, c, TopicFilter, filter)
	want := ids(keep)
	got := map[string]delivery{}
	check := func(d delivery) {
		require.Equal(t, "keep", d.Tag, "message %s passed the filter %q", d.ID, filter.Expression)
		if _, ok := want[d.ID]; ok {
			got[d.ID] = d
		}
	}
	rd.until(ctx, t, invisible, check, func() bool { return len(got) == len(keep) }, func() string { return missingIDs(want, got) })
	// One more round: nothing else arrives, the excluded messages included.
	for _, d := range rd.receive(ctx, t, invisible) {
		check(d)
		t.Fatalf("%s: unexpected message %s (tag %q) after the matching ones", s.b.Name, d.ID, d.Tag)
	}
	for _, d := range got {
		rd.ack(ctx, t, d)
	}
}
