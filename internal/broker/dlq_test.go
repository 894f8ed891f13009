package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// A group reading its own dead-letter topic never dead-letters into it
// again (doc.go): a ForwardMessageToDeadLetterQueue of a message read from
// that topic used to append a copy to the very topic being read, which the
// group received again at once, for ever. Now the message stays in flight
// and comes back when its invisible time ends.
func TestForwardFromOwnDeadLetterTopicKeepsTheMessage(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-dlq-fwd")
	c.sendN("normal", 1)
	r := c.receive("g3", "normal", 1, 10*time.Second, 2*time.Second)
	require.Len(t, r.messages, 1)
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	fwd := func(topic string, m *rmqpb.Message) {
		resp, err := c.rpc.ForwardMessageToDeadLetterQueue(ctx, &rmqpb.ForwardMessageToDeadLetterQueueRequest{
			Group: res("g3"), Topic: res(topic), ReceiptHandle: m.GetSystemProperties().GetReceiptHandle(),
			MessageId: m.GetSystemProperties().GetMessageId(), DeliveryAttempt: m.GetSystemProperties().GetDeliveryAttempt(),
			MaxDeliveryAttempts: 3,
		})
		require.NoError(t, err)
		require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	}
	fwd("normal", r.messages[0])
	dlq := DLQTopic("g3")
	_, before := b.store.Offsets(dlq, 0)
	require.Equal(t, int64(1), before)

	got := c.receive("g3", dlq, 1, time.Second, 300*time.Millisecond)
	require.Len(t, got.messages, 1)
	fwd(dlq, got.messages[0])
	_, after := b.store.Offsets(dlq, 0)
	again := c.receive("g3", dlq, 1, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, before, after, "dead-lettering a message of the group's own DLQ appended %d copies to the topic being read (received again at once: %d)",
		after-before, len(again.messages))
	require.Empty(t, again.messages)
	back := c.receive("g3", dlq, 1, 10*time.Second, 3*time.Second)
	require.Len(t, back.messages, 1, "the message comes back after its invisible time")
	require.Equal(t, got.messages[0].GetSystemProperties().GetMessageId(), back.messages[0].GetSystemProperties().GetMessageId())
}
