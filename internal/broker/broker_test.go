package broker

import (
	"context"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

func TestQueryRoute(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	require.NoError(t, b.SetPeers([]Peer{{Name: "b1", Endpoint: "127.0.0.1:1"}}))
	c := dial(t, b.Addr(), "client-route")
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()

	resp, err := c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("normal")})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())
	require.Len(t, resp.GetMessageQueues(), 8, "4 queues on each of 2 brokers")
	perBroker := map[string][]int32{}
	for _, mq := range resp.GetMessageQueues() {
		assert.Equal(t, rmqpb.Permission_READ_WRITE, mq.GetPermission())
		assert.Equal(t, []rmqpb.MessageType{rmqpb.MessageType_NORMAL}, mq.GetAcceptMessageTypes())
		assert.Equal(t, int32(0), mq.GetBroker().GetId())
		addr := mq.GetBroker().GetEndpoints().GetAddresses()[0]
		if mq.GetBroker().GetName() == "b0" {
			assert.Equal(t, b.Addr(), addr.GetHost()+":"+itoa(addr.GetPort()))
		}
		perBroker[mq.GetBroker().GetName()] = append(perBroker[mq.GetBroker().GetName()], mq.GetId())
	}
	assert.Equal(t, map[string][]int32{"b0": {0, 1, 2, 3}, "b1": {0, 1, 2, 3}}, perBroker)

	resp, err = c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("mixed")})
	require.NoError(t, err)
	assert.Len(t, resp.GetMessageQueues()[0].GetAcceptMessageTypes(), 4)

	resp, err = c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("nope")})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_TOPIC_NOT_FOUND, resp.GetStatus().GetCode())
	resp, err = c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("bad topic!")})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_ILLEGAL_TOPIC, resp.GetStatus().GetCode())
	resp, err = c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("TBW102")})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_ILLEGAL_TOPIC, resp.GetStatus().GetCode())
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }

func fmtInt(v int64) string { return strconv.FormatInt(v, 10) }

func TestQueryAssignment(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	require.NoError(t, b.SetPeers([]Peer{{Name: "b1", Endpoint: "127.0.0.1:1"}}))
	c := dial(t, b.Addr(), "client-assign")
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.QueryAssignment(ctx, &rmqpb.QueryAssignmentRequest{Topic: res("normal"), Group: res("g1")})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())
	require.Len(t, resp.GetAssignments(), 2, "one per broker")
	for _, a := range resp.GetAssignments() {
		assert.Equal(t, int32(-1), a.GetMessageQueue().GetId())
	}
	resp, err = c.rpc.QueryAssignment(ctx, &rmqpb.QueryAssignmentRequest{Topic: res("fifo"), Group: res("gfifo")})
	require.NoError(t, err)
	require.Len(t, resp.GetAssignments(), 4, "a FIFO group gets every queue of every broker")
	resp, err = c.rpc.QueryAssignment(ctx, &rmqpb.QueryAssignmentRequest{Topic: res("normal"), Group: res("bad group")})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_ILLEGAL_CONSUMER_GROUP, resp.GetStatus().GetCode())
}

func TestSendBatchHonoursQueueIDAndReturnsEntryPerMessage(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-send")
	var batch []*rmqpb.Message
	for i := 0; i < 5; i++ {
		m := msg("normal", "batch-"+fmtInt(int64(i)), "payload")
		m.SystemProperties.QueueId = 2
		batch = append(batch, m)
	}
	resp := c.send(batch...)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	require.Len(t, resp.GetEntries(), 5)
	for i, e := range resp.GetEntries() {
		assert.Equal(t, rmqpb.Code_OK, e.GetStatus().GetCode())
		assert.Equal(t, "batch-"+fmtInt(int64(i)), e.GetMessageId())
		assert.Equal(t, resp.GetEntries()[0].GetOffset()+int64(i), e.GetOffset(), "contiguous offsets")
	}
	got := c.drain("g1", "normal", 5, 10*time.Second)
	require.Len(t, got, 5)
	for _, m := range got {
		assert.Equal(t, int32(2), m.GetSystemProperties().GetQueueId())
	}

	// Without a valid queue id the broker spreads single sends round robin.
	queues := map[int32]bool{}
	for i := 0; i < 8; i++ {
		m := msg("normal", "rr-"+fmtInt(int64(i)), "x")
		m.SystemProperties.QueueId = -1
		resp := c.send(m)
		require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())
	}
	for _, m := range c.drain("g1", "normal", 8, 10*time.Second) {
		queues[m.GetSystemProperties().GetQueueId()] = true
	}
	assert.Len(t, queues, 4)
}

func TestReceiveAckShapeAndContent(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-recv")
	m := msg("normal", "m-1", "hello")
	m.SystemProperties.Tag = proto.String("tagA")
	m.SystemProperties.Keys = []string{"k1", "k2"}
	m.SystemProperties.BornHost = "producer-host"
	m.SystemProperties.TraceContext = proto.String("trace-1")
	m.UserProperties = map[string]string{"lane": "a.x"}
	require.Equal(t, rmqpb.Code_OK, c.send(m).GetStatus().GetCode())

	r := c.receive("g1", "normal", 32, 5*time.Second, 2*time.Second)
	assert.Equal(t, []string{"status", "message", "delivery_timestamp"}, r.order)
	require.Equal(t, rmqpb.Code_OK, r.status.GetCode())
	require.Len(t, r.messages, 1)
	got := r.messages[0]
	sp := got.GetSystemProperties()
	assert.Equal(t, "normal", got.GetTopic().GetName())
	assert.Equal(t, []byte("hello"), got.GetBody())
	assert.Equal(t, "m-1", sp.GetMessageId())
	assert.Equal(t, "tagA", sp.GetTag())
	assert.Equal(t, []string{"k1", "k2"}, sp.GetKeys())
	assert.Equal(t, "producer-host", sp.GetBornHost())
	assert.Equal(t, "trace-1", sp.GetTraceContext())
	assert.Equal(t, map[string]string{"lane": "a.x"}, got.GetUserProperties())
	assert.Equal(t, int32(1), sp.GetDeliveryAttempt())
	assert.Equal(t, "5D41402ABC4B2A76B9719D911017C592", sp.GetBodyDigest().GetChecksum(), "MD5 of the body, upper hex")
	assert.Equal(t, rmqpb.MessageType_NORMAL, sp.GetMessageType())
	assert.Equal(t, b.Addr(), sp.GetStoreHost())
	assert.NotEmpty(t, sp.GetReceiptHandle())
	assert.NotNil(t, sp.QueueOffset)

	ack := c.ack("g1", "normal", got)
	require.Equal(t, rmqpb.Code_OK, ack.GetStatus().GetCode())
	require.Len(t, ack.GetEntries(), 1)
	assert.Equal(t, "m-1", ack.GetEntries()[0].GetMessageId())

	// Acked: nothing more, and acking again within the invisible time is
	// OK (a retried ack), as on the proxy.
	r = c.receive("g1", "normal", 32, 5*time.Second, 200*time.Millisecond)
	assert.Equal(t, []string{"status", "delivery_timestamp"}, r.order)
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, r.status.GetCode())
	ack = c.ack("g1", "normal", got)
	assert.Equal(t, rmqpb.Code_OK, ack.GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_OK, ack.GetEntries()[0].GetStatus().GetCode())

	// Another group sees the message too.
	assert.Len(t, c.drain("g3", "normal", 1, 5*time.Second), 1)
}

func TestAckMixedResults(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-mixed")
	c.sendN("normal", 1)
	r := c.receive("g1", "normal", 1, 5*time.Second, 2*time.Second)
	require.Len(t, r.messages, 1)
	bogus := proto.Clone(r.messages[0]).(*rmqpb.Message)
	bogus.SystemProperties.ReceiptHandle = proto.String("garbage")
	ack := c.ack("g1", "normal", r.messages[0], bogus)
	assert.Equal(t, rmqpb.Code_MULTIPLE_RESULTS, ack.GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_OK, ack.GetEntries()[0].GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, ack.GetEntries()[1].GetStatus().GetCode(), "a handle that does not decode")
	empty := c.ack("g1", "normal")
	assert.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, empty.GetStatus().GetCode())
}

func TestRedeliveryAfterInvisibleTime(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-redeliver")
	c.sendN("normal", 1)
	first := c.receive("g1", "normal", 1, 200*time.Millisecond, 2*time.Second)
	require.Len(t, first.messages, 1)
	assert.Equal(t, int32(1), first.messages[0].GetSystemProperties().GetDeliveryAttempt())

	// Not acked: after the invisible time it comes again, attempt 2, and
	// the long poll wakes for it.
	second := c.receive("g1", "normal", 1, 5*time.Second, 3*time.Second)
	require.Len(t, second.messages, 1)
	assert.Equal(t, first.messages[0].GetSystemProperties().GetMessageId(), second.messages[0].GetSystemProperties().GetMessageId())
	assert.Equal(t, int32(2), second.messages[0].GetSystemProperties().GetDeliveryAttempt())
	assert.Equal(t, rmqpb.Code_INVALID_RECEIPT_HANDLE, c.ack("g1", "normal", first.messages[0]).GetStatus().GetCode(), "the first handle is expired")
	assert.Equal(t, rmqpb.Code_OK, c.ack("g1", "normal", second.messages[0]).GetStatus().GetCode())
}

func TestNackThenRetry(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-nack")
	c.sendN("normal", 1)
	r := c.receive("g1", "normal", 1, 10*time.Second, 2*time.Second)
	require.Len(t, r.messages, 1)
	old := r.messages[0].GetSystemProperties().GetReceiptHandle()
	ch := c.change("g1", "normal", old, 0)
	require.Equal(t, rmqpb.Code_OK, ch.GetStatus().GetCode(), ch.GetStatus().GetMessage())
	require.NotEmpty(t, ch.GetReceiptHandle())
	assert.NotEqual(t, old, ch.GetReceiptHandle(), "a new handle")
	// The replaced handle is within its invisible time: OK, and no effect.
	assert.Equal(t, rmqpb.Code_OK, c.ackHandle("g1", "normal", old).GetStatus().GetCode())

	r2 := c.receive("g1", "normal", 1, 10*time.Second, 2*time.Second)
	require.Len(t, r2.messages, 1, "the ack with the replaced handle did not ack the message")
	assert.Equal(t, int32(2), r2.messages[0].GetSystemProperties().GetDeliveryAttempt())
	// The handle from the change expired (invisible time 0).
	assert.Equal(t, rmqpb.Code_INVALID_RECEIPT_HANDLE, c.ackHandle("g1", "normal", ch.GetReceiptHandle()).GetStatus().GetCode())

	// Extending the invisible time keeps the message away and the new handle acks.
	ch = c.change("g1", "normal", r2.messages[0].GetSystemProperties().GetReceiptHandle(), 10*time.Second)
	require.Equal(t, rmqpb.Code_OK, ch.GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, c.receive("g1", "normal", 1, 10*time.Second, 100*time.Millisecond).status.GetCode())
	assert.Equal(t, rmqpb.Code_OK, c.ackHandle("g1", "normal", ch.GetReceiptHandle()).GetStatus().GetCode())

	bad := c.change("g1", "normal", ch.GetReceiptHandle(), 13*time.Hour)
	assert.Equal(t, rmqpb.Code_ILLEGAL_INVISIBLE_TIME, bad.GetStatus().GetCode())
}

func TestDeadLetterAfterMaxAttempts(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-dlq")
	id := c.sendN("normal", 1)[0]
	for attempt := int32(1); attempt <= 3; attempt++ {
		r := c.receive("g3", "normal", 1, 10*time.Second, 2*time.Second)
		require.Len(t, r.messages, 1, "attempt %d", attempt)
		assert.Equal(t, attempt, r.messages[0].GetSystemProperties().GetDeliveryAttempt())
		require.Equal(t, rmqpb.Code_OK, c.change("g3", "normal", r.messages[0].GetSystemProperties().GetReceiptHandle(), 0).GetStatus().GetCode())
	}
	r := c.receive("g3", "normal", 1, 10*time.Second, 200*time.Millisecond)
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, r.status.GetCode(), "after 3 attempts the message left the topic")

	dlq := DLQTopic("g3")
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	route, err := c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res(dlq)})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, route.GetStatus().GetCode())
	require.Len(t, route.GetMessageQueues(), 1)

	got := c.drain("dlq-reader", dlq, 1, 5*time.Second)
	require.Len(t, got, 1)
	sp := got[0].GetSystemProperties()
	assert.Equal(t, id, sp.GetMessageId())
	// As read from the proxy: attempts made (3) + the pop that found them
	// used up + 1.
	assert.Equal(t, int32(5), sp.GetDeliveryAttempt())
	require.NotNil(t, sp.GetDeadLetterQueue())
	assert.Equal(t, "normal", sp.GetDeadLetterQueue().GetTopic())
	assert.Equal(t, id, sp.GetDeadLetterQueue().GetMessageId())
	assert.Equal(t, []byte("body "+id), got[0].GetBody())
}

func TestForwardToDeadLetterQueue(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-fwd")
	id := c.sendN("normal", 1)[0]
	r := c.receive("g1", "normal", 1, 10*time.Second, 2*time.Second)
	require.Len(t, r.messages, 1)
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.ForwardMessageToDeadLetterQueue(ctx, &rmqpb.ForwardMessageToDeadLetterQueueRequest{
		Group: res("g1"), Topic: res("normal"), ReceiptHandle: r.messages[0].GetSystemProperties().GetReceiptHandle(),
		MessageId: id, DeliveryAttempt: 1, MaxDeliveryAttempts: 16,
	})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, c.receive("g1", "normal", 1, 10*time.Second, 100*time.Millisecond).status.GetCode())
	got := c.drain("dlq-reader", DLQTopic("g1"), 1, 5*time.Second)
	require.Len(t, got, 1)
	assert.Equal(t, id, got[0].GetSystemProperties().GetDeadLetterQueue().GetMessageId())
	assert.Equal(t, int32(2), got[0].GetSystemProperties().GetDeliveryAttempt(), "attempts made (1) + 1, as from the proxy")
	// A retried forward with the same handle is OK and writes no second copy.
	resp, err = c.rpc.ForwardMessageToDeadLetterQueue(ctx, &rmqpb.ForwardMessageToDeadLetterQueueRequest{
		Group: res("g1"), Topic: res("normal"), ReceiptHandle: r.messages[0].GetSystemProperties().GetReceiptHandle(),
		MessageId: id, DeliveryAttempt: 1, MaxDeliveryAttempts: 16,
	})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	assert.Empty(t, c.drain("dlq-reader", DLQTopic("g1"), 1, 300*time.Millisecond))
}

func TestFIFOGroupDeliversInOrder(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-fifo")
	var sent []string
	for i := 0; i < 5; i++ {
		m := msg("fifo", "f-"+fmtInt(int64(i)), "x")
		m.SystemProperties.MessageGroup = proto.String("order-1")
		m.SystemProperties.MessageType = rmqpb.MessageType_FIFO
		m.SystemProperties.QueueId = 0
		require.Equal(t, rmqpb.Code_OK, c.send(m).GetStatus().GetCode())
		sent = append(sent, m.GetSystemProperties().GetMessageId())
	}
	// One at a time: the queue is held while its head is in flight.
	r := c.receive("gfifo", "fifo", 1, 10*time.Second, 2*time.Second)
	require.Len(t, r.messages, 1)
	assert.Equal(t, sent[0], r.messages[0].GetSystemProperties().GetMessageId())
	assert.Equal(t, "order-1", r.messages[0].GetSystemProperties().GetMessageGroup())
	assert.Equal(t, rmqpb.MessageType_FIFO, r.messages[0].GetSystemProperties().GetMessageType())
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, c.receive("gfifo", "fifo", 1, 10*time.Second, 100*time.Millisecond).status.GetCode(),
		"nothing past an un-acked message")
	require.Equal(t, rmqpb.Code_OK, c.ack("gfifo", "fifo", r.messages[0]).GetStatus().GetCode())

	// A nacked message comes back before the ones after it.
	r = c.receive("gfifo", "fifo", 2, 10*time.Second, 2*time.Second)
	require.Equal(t, sent[1:3], ids(r.messages))
	require.Equal(t, rmqpb.Code_OK, c.ack("gfifo", "fifo", r.messages[1]).GetStatus().GetCode())
	require.Equal(t, rmqpb.Code_OK, c.change("gfifo", "fifo", r.messages[0].GetSystemProperties().GetReceiptHandle(), 0).GetStatus().GetCode())
	r = c.receive("gfifo", "fifo", 32, 10*time.Second, 2*time.Second)
	require.Equal(t, []string{sent[1], sent[3], sent[4]}, ids(r.messages))
	assert.Equal(t, int32(2), r.messages[0].GetSystemProperties().GetDeliveryAttempt())
}

func TestTagFilter(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-tag")
	for _, tag := range []string{"a", "b", "c"} {
		m := msg("normal", "tag-"+tag, "x")
		m.SystemProperties.Tag = proto.String(tag)
		m.SystemProperties.QueueId = 1
		require.Equal(t, rmqpb.Code_OK, c.send(m).GetStatus().GetCode())
	}
	// Sent messages become visible as the store dispatches them: collect.
	var got []string
	for end := time.Now().Add(10 * time.Second); len(got) < 2 && time.Now().Before(end); {
		r := c.receive("g1", "normal", 32, 10*time.Second, 2*time.Second, withFilter("a || c"))
		got = append(got, ids(r.messages)...)
		c.ack("g1", "normal", r.messages...)
	}
	sort.Strings(got)
	assert.Equal(t, []string{"tag-a", "tag-c"}, got)
	// b was filtered out and acked on the way.
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, c.receive("g1", "normal", 32, 10*time.Second, 100*time.Millisecond).status.GetCode())
}

func TestDelayedMessageWaitsForItsTime(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-delay")
	at := time.Now().Add(500 * time.Millisecond)
	m := msg("delay", "d-1", "later")
	m.SystemProperties.DeliveryTimestamp = timestamppb.New(at)
	m.SystemProperties.MessageType = rmqpb.MessageType_DELAY
	require.Equal(t, rmqpb.Code_OK, c.send(m).GetStatus().GetCode())
	r := c.receive("g1", "delay", 1, 10*time.Second, 3*time.Second)
	require.Len(t, r.messages, 1)
	assert.False(t, time.Now().Before(at), "never early")
	sp := r.messages[0].GetSystemProperties()
	assert.Equal(t, at.UnixMilli(), sp.GetDeliveryTimestamp().AsTime().UnixMilli())
	assert.Equal(t, int32(1), sp.GetDeliveryAttempt())
	assert.Equal(t, rmqpb.MessageType_DELAY, sp.GetMessageType())
}

func TestLongPollWakesOnArrival(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-poll")
	done := make(chan received, 1)
	go func() { done <- c.receive("g1", "normal", 32, 10*time.Second, 20*time.Second) }()
	time.Sleep(200 * time.Millisecond)
	c.sendN("normal", 1)
	select {
	case r := <-done:
		require.Len(t, r.messages, 1)
	case <-time.After(15 * time.Second):
		t.Fatal("long poll was not woken by the new message")
	}
}

func TestReceiveValidation(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-recv-val")
	base := func() *rmqpb.ReceiveMessageRequest {
		return &rmqpb.ReceiveMessageRequest{
			Group: res("g1"), MessageQueue: &rmqpb.MessageQueue{Topic: res("normal")},
			FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"},
			BatchSize:        1, InvisibleDuration: durationpb.New(time.Second), LongPollingTimeout: durationpb.New(100 * time.Millisecond),
		}
	}
	cases := []struct {
		name string
		mod  func(*rmqpb.ReceiveMessageRequest)
		want rmqpb.Code
	}{
		{"unknown topic", func(r *rmqpb.ReceiveMessageRequest) { r.MessageQueue.Topic = res("nope") }, rmqpb.Code_TOPIC_NOT_FOUND},
		{"illegal topic", func(r *rmqpb.ReceiveMessageRequest) { r.MessageQueue.Topic = res("a b") }, rmqpb.Code_ILLEGAL_TOPIC},
		{"illegal group", func(r *rmqpb.ReceiveMessageRequest) { r.Group = res("") }, rmqpb.Code_ILLEGAL_CONSUMER_GROUP},
		{"system group", func(r *rmqpb.ReceiveMessageRequest) { r.Group = res("CID_RMQ_SYS_X") }, rmqpb.Code_ILLEGAL_CONSUMER_GROUP},
		{"no invisible", func(r *rmqpb.ReceiveMessageRequest) { r.InvisibleDuration = nil }, rmqpb.Code_ILLEGAL_INVISIBLE_TIME},
		{"invisible too long", func(r *rmqpb.ReceiveMessageRequest) { r.InvisibleDuration = durationpb.New(13 * time.Hour) }, rmqpb.Code_ILLEGAL_INVISIBLE_TIME},
		{"sql filter", func(r *rmqpb.ReceiveMessageRequest) { r.FilterExpression.Type = rmqpb.FilterType_SQL }, rmqpb.Code_ILLEGAL_FILTER_EXPRESSION},
		{"batch 0", func(r *rmqpb.ReceiveMessageRequest) { r.BatchSize = 0 }, rmqpb.Code_BAD_REQUEST},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := base()
			tc.mod(req)
			r := c.receiveReq(req, 5*time.Second)
			assert.Equal(t, tc.want, r.status.GetCode(), r.status.GetMessage())
			assert.Equal(t, []string{"status", "delivery_timestamp"}, r.order)
		})
	}

	// Polling longer than the deadline allows.
	cfg := testConfig(t, t.TempDir())
	cfg.Name = "strict-poll"
	cfg.Limits.MinLongPolling = 5 * time.Second
	b2 := startBroker(t, cfg)
	c2 := dial(t, b2.Addr(), "client-poll-time")
	r := c2.receiveReq(base(), time.Second)
	assert.Equal(t, rmqpb.Code_BAD_REQUEST, r.status.GetCode(), "a client that does not say its version is taken as older than 5.0.3")
	c2.version = "5.1.4"
	r = c2.receiveReq(base(), time.Second)
	assert.Equal(t, rmqpb.Code_ILLEGAL_POLLING_TIME, r.status.GetCode())

	// No deadline at all.
	ctx := metadataCtx(context.Background(), "client-nodeadline")
	stream, err := c.rpc.ReceiveMessage(ctx, base())
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_BAD_REQUEST, first.GetStatus().GetCode())
}

func TestClientIDRequired(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "")
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	route, err := c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("normal")})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_CLIENT_ID_REQUIRED, route.GetStatus().GetCode())
	send, err := c.rpc.SendMessage(ctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("normal", "x", "y")}})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_CLIENT_ID_REQUIRED, send.GetStatus().GetCode())
	assert.Empty(t, send.GetEntries())

	r := c.receive("g1", "normal", 1, time.Second, 100*time.Millisecond)
	assert.Equal(t, rmqpb.Code_CLIENT_ID_REQUIRED, r.status.GetCode())
	assert.True(t, r.tail)

	tel, err := c.rpc.Telemetry(ctx)
	require.NoError(t, err)
	cmd, err := tel.Recv()
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_CLIENT_ID_REQUIRED, cmd.GetStatus().GetCode())
	_, err = tel.Recv()
	assert.ErrorContains(t, err, "EOF")
}

// A filter that skips a long run of messages still finds the match behind
// it within one long poll: the bounded scan resumes at once.
func TestFilterScansPastLongNonMatchingRuns(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-scan")
	for i := 0; i < 11; i++ {
		var batch []*rmqpb.Message
		for j := 0; j < 100; j++ {
			m := msg("normal", "skip-"+fmtInt(int64(i*100+j)), "x")
			m.SystemProperties.Tag = proto.String("noise")
			m.SystemProperties.QueueId = 0
			batch = append(batch, m)
		}
		require.Equal(t, rmqpb.Code_OK, c.send(batch...).GetStatus().GetCode())
	}
	m := msg("normal", "wanted", "x")
	m.SystemProperties.Tag = proto.String("signal")
	m.SystemProperties.QueueId = 0
	require.Equal(t, rmqpb.Code_OK, c.send(m).GetStatus().GetCode())
	var got []string
	for end := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(end); {
		got = ids(c.receive("g1", "normal", 1, 10*time.Second, 3*time.Second, withFilter("signal")).messages)
	}
	assert.Equal(t, []string{"wanted"}, got)
}

// A group reading its own dead-letter topic gets the copy, although it
// carries more attempts than the group allows, and the topic does not grow
// (each pop used to append the copy to the topic it read).
func TestGroupReadsItsOwnDeadLetterTopic(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-dlq-loop")
	c.sendN("normal", 1)
	for i := 0; i < 3; i++ {
		var r received
		for j := 0; j < 20 && len(r.messages) == 0; j++ {
			r = c.receive("g3", "normal", 1, 10*time.Second, 200*time.Millisecond)
		}
		require.Len(t, r.messages, 1)
		require.Equal(t, rmqpb.Code_OK, c.change("g3", "normal", r.messages[0].GetSystemProperties().GetReceiptHandle(), 0).GetStatus().GetCode())
	}
	r := c.receive("g3", "normal", 1, 10*time.Second, 200*time.Millisecond)
	require.Empty(t, r.messages)
	dlq := DLQTopic("g3")
	_, before := b.store.Offsets(dlq, 0)
	require.Equal(t, int64(1), before)
	got := c.receive("g3", dlq, 1, 10*time.Second, 300*time.Millisecond)
	require.Len(t, got.messages, 1)
	_, after := b.store.Offsets(dlq, 0)
	require.Equal(t, before, after, "the dead-letter topic grew by itself")
}

// A broker reached through a proxy names the proxy in its routes, so that
// clients keep going through it; a malformed Advertise is refused by New.
func TestQueryRouteNamesTheAdvertisedAddress(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Advertise = "127.0.0.1:7"
	b := startBroker(t, cfg)
	c := dial(t, b.Addr(), "client-advertise")
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("normal")})
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetMessageQueues())
	for _, mq := range resp.GetMessageQueues() {
		addr := mq.GetBroker().GetEndpoints().GetAddresses()[0]
		assert.Equal(t, "127.0.0.1:7", addr.GetHost()+":"+itoa(addr.GetPort()))
	}

	bad := testConfig(t, t.TempDir())
	bad.Advertise = "no-port"
	_, err = New(bad)
	require.ErrorIs(t, err, ErrInvalidConfig)
}
