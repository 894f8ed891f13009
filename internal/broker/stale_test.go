package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// An old handle still within its invisible time answers OK for ack,
// ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, and never
// touches the newer delivery another consumer holds: that consumer's
// handle still acks, the message stays hidden meanwhile, and nothing goes
// to the dead-letter topic.
func TestStaleHandleLeavesNewerDeliveryAlone(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	a := dial(t, b.Addr(), "client-stale-a")
	other := dial(t, b.Addr(), "client-stale-b")
	id := a.sendN("normal", 1)[0]

	first := a.receive("g1", "normal", 1, 10*time.Second, 2*time.Second)
	require.Len(t, first.messages, 1)
	old := first.messages[0].GetSystemProperties().GetReceiptHandle()
	require.Equal(t, rmqpb.Code_OK, a.change("g1", "normal", old, 0).GetStatus().GetCode())

	again := other.receive("g1", "normal", 1, 10*time.Second, 2*time.Second)
	require.Len(t, again.messages, 1)
	require.Equal(t, id, again.messages[0].GetSystemProperties().GetMessageId())
	require.Equal(t, int32(2), again.messages[0].GetSystemProperties().GetDeliveryAttempt())

	// The first consumer, late, acts on its old handle.
	assert.Equal(t, rmqpb.Code_OK, a.ackHandle("g1", "normal", old).GetStatus().GetCode())
	ch := a.change("g1", "normal", old, 5*time.Second)
	require.Equal(t, rmqpb.Code_OK, ch.GetStatus().GetCode())
	assert.NotEmpty(t, ch.GetReceiptHandle())
	assert.NotEqual(t, old, ch.GetReceiptHandle())
	assert.Equal(t, rmqpb.Code_OK, a.ackHandle("g1", "normal", ch.GetReceiptHandle()).GetStatus().GetCode(), "the handle a stale change returns names nothing")
	ctx, cancel := a.ctx(5 * time.Second)
	defer cancel()
	fw, err := a.rpc.ForwardMessageToDeadLetterQueue(ctx, &rmqpb.ForwardMessageToDeadLetterQueueRequest{
		Group: res("g1"), Topic: res("normal"), ReceiptHandle: old, MessageId: id, DeliveryAttempt: 1, MaxDeliveryAttempts: 16,
	})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_OK, fw.GetStatus().GetCode(), fw.GetStatus().GetMessage())

	// None of it reached the newer delivery: still hidden, not dead-lettered,
	// and its own handle acks it.
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, a.receive("g1", "normal", 1, 10*time.Second, 100*time.Millisecond).status.GetCode())
	assert.Empty(t, a.drain("dlq-reader", DLQTopic("g1"), 1, 300*time.Millisecond))
	assert.Equal(t, rmqpb.Code_OK, other.ack("g1", "normal", again.messages[0]).GetStatus().GetCode())

	// After the ack: acking and changing again are OK and bring nothing back.
	assert.Equal(t, rmqpb.Code_OK, other.ack("g1", "normal", again.messages[0]).GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_OK, other.change("g1", "normal", again.messages[0].GetSystemProperties().GetReceiptHandle(), 0).GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, a.receive("g1", "normal", 1, 10*time.Second, 200*time.Millisecond).status.GetCode(), "an acked message is not resurrected")
}

// Handles past their invisible time are INVALID_RECEIPT_HANDLE, stale or
// not, as the proxy judges them.
func TestExpiredHandles(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-expired")
	c.sendN("normal", 1)
	r := c.receive("g1", "normal", 1, 100*time.Millisecond, 2*time.Second)
	require.Len(t, r.messages, 1)
	h := r.messages[0].GetSystemProperties().GetReceiptHandle()
	time.Sleep(150 * time.Millisecond)
	// Current delivery, expired, not yet delivered again.
	assert.Equal(t, rmqpb.Code_INVALID_RECEIPT_HANDLE, c.ackHandle("g1", "normal", h).GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_INVALID_RECEIPT_HANDLE, c.change("g1", "normal", h, time.Second).GetStatus().GetCode())
	again := c.receive("g1", "normal", 1, 10*time.Second, 2*time.Second)
	require.Len(t, again.messages, 1)
	// Stale and expired.
	assert.Equal(t, rmqpb.Code_INVALID_RECEIPT_HANDLE, c.ackHandle("g1", "normal", h).GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_OK, c.ack("g1", "normal", again.messages[0]).GetStatus().GetCode())
}

// A message carries the delivery_attempt its producer set (the proxy's
// reconsume count): deliveries count on from it, and the group's maximum
// attempts are checked against the sum.
func TestCarriedAttempts(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-carried")
	m := msg("normal", "carried-1", "tired")
	m.SystemProperties.DeliveryAttempt = proto.Int32(3)
	m.SystemProperties.QueueId = 0
	require.Equal(t, rmqpb.Code_OK, c.send(m).GetStatus().GetCode())

	// g1 allows 17: first delivery is attempt 4.
	got := c.drain("g1", "normal", 1, 5*time.Second)
	require.Len(t, got, 1)
	assert.Equal(t, int32(4), got[0].GetSystemProperties().GetDeliveryAttempt())

	// g3 allows 3: already used up, straight to its dead-letter topic,
	// carrying one more.
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, c.receive("g3", "normal", 1, 10*time.Second, 200*time.Millisecond).status.GetCode())
	dead := c.drain("dlq-reader", DLQTopic("g3"), 1, 5*time.Second)
	require.Len(t, dead, 1)
	assert.Equal(t, "carried-1", dead[0].GetSystemProperties().GetMessageId())
	assert.Equal(t, int32(5), dead[0].GetSystemProperties().GetDeliveryAttempt())
}
