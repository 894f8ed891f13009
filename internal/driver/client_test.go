package driver

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

const liveness = 10 * time.Second

func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.ReconnectBackoff == 0 {
		cfg.ReconnectBackoff = 20 * time.Millisecond
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), liveness)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func producerConfig() Config { return Config{Type: Producer, Topics: []string{"orders"}} }

func consumerConfig() Config {
	return Config{Type: SimpleConsumer, Group: "g1", Subscriptions: []Subscription{{Topic: "orders", Filter: Filter{Expression: "paid"}}}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	t.Cleanup(cancel)
	return ctx
}

func TestConfigValidation(t *testing.T) {
	bad := []Config{
		{},
		{Type: Producer, Topics: []string{""}},
		{Type: Producer, Group: "g"},
		{Type: SimpleConsumer, Subscriptions: []Subscription{{Topic: "t"}}},
		{Type: PushConsumer, Group: "g"},
		{Type: PushConsumer, Group: "g", Subscriptions: []Subscription{{Topic: ""}}},
		{Type: Producer, Credentials: &Credentials{AccessKey: "ak"}},
		{Type: Producer, RequestTimeout: -time.Second},
	}
	for i, cfg := range bad {
		_, err := New(cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, "case %d", i)
	}
}

func TestHandshakeSendsSettingsAndHeadersBeforeFirstCall(t *testing.T) {
	f := startFake(t, nil)
	c := newTestClient(t, Config{Type: Producer, Topics: []string{"orders", "audit"}, Namespace: "ns",
		Credentials: &Credentials{AccessKey: "AK", SecretKey: "SK"}})
	route, err := c.Route(ctxT(t), f.addr, "orders")
	require.NoError(t, err)
	require.Len(t, route.Queues, 4)

	require.Equal(t, 1, f.count(func(f *fakeServer) int { return len(f.settings) }))
	s := f.settings[0]
	assert.Equal(t, rmqpb.ClientType_PRODUCER, s.GetClientType())
	assert.Equal(t, rmqpb.AddressScheme_IPv4, s.GetAccessPoint().GetScheme())
	assert.Equal(t, []string{"orders", "audit"}, []string{s.GetPublishing().GetTopics()[0].GetName(), s.GetPublishing().GetTopics()[1].GetName()})
	assert.Equal(t, 3*time.Second, s.GetRequestTimeout().AsDuration())
	assert.Equal(t, rmqpb.Language_GOLANG, s.GetUserAgent().GetLanguage())
	assert.Equal(t, ClientVersion, s.GetUserAgent().GetVersion())
	assert.NotEmpty(t, s.GetUserAgent().GetHostname())

	for _, rpc := range []string{"Telemetry", "QueryRoute"} {
		md := f.lastHeader(rpc)
		require.NotNil(t, md, rpc)
		assert.Equal(t, []string{c.ID()}, md.Get("x-mq-client-id"), rpc)
		assert.Equal(t, []string{"GO"}, md.Get("x-mq-language"), rpc)
		assert.Equal(t, []string{"v2"}, md.Get("x-mq-protocol"), rpc)
		assert.Equal(t, []string{ClientVersion}, md.Get("x-mq-client-version"), rpc)
		assert.Equal(t, []string{"ns"}, md.Get("x-mq-namespace"), rpc)
		assert.Len(t, md.Get("x-mq-request-id"), 1, rpc)
		dt := md.Get("x-mq-date-time")
		require.Len(t, dt, 1, rpc)
		assert.Equal(t, []string{Sign(Credentials{AccessKey: "AK", SecretKey: "SK"}, dt[0])}, md.Get("authorization"), rpc)
	}

	ss, ok := c.ServerSettings(f.addr)
	require.True(t, ok)
	assert.Equal(t, 3, ss.Retry.MaxAttempts)
	assert.Equal(t, 10*time.Millisecond, ss.Retry.Initial)
	assert.Equal(t, 4<<20, ss.MaxBodySize)
	assert.True(t, ss.ValidateMessageType)
	assert.Equal(t, 40*time.Millisecond, ss.Retry.Backoff(3))
}

func TestCallsWaitForTheSettingsEcho(t *testing.T) {
	release := make(chan struct{})
	f := startFake(t, func(f *fakeServer) {
		f.onTelemetryOpen = func(int) *rmqpb.TelemetryCommand {
			<-release
			return nil
		}
	})
	c := newTestClient(t, producerConfig())
	done := make(chan error, 1)
	go func() {
		_, err := c.QueryRoute(ctxT(t), f.addr, "orders")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("QueryRoute returned before the Settings echo: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	assert.Equal(t, 0, f.count(func(f *fakeServer) int { return len(f.headers["QueryRoute"]) }))
	close(release)
	require.NoError(t, <-done)

	// A caller whose ctx ends first gets its own ctx error.
	g := startFake(t, func(f *fakeServer) {
		f.onTelemetryOpen = func(int) *rmqpb.TelemetryCommand { time.Sleep(time.Second); return nil }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.QueryRoute(ctx, g.addr, "orders")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestTelemetryAuthFailureFailsCallsFast(t *testing.T) {
	f := startFake(t, func(f *fakeServer) {
		f.onTelemetryOpen = func(int) *rmqpb.TelemetryCommand {
			return &rmqpb.TelemetryCommand{Status: &rmqpb.Status{Code: rmqpb.Code_UNAUTHORIZED, Message: "username cannot be null"}}
		}
	})
	c := newTestClient(t, producerConfig())
	start := time.Now()
	_, err := c.QueryRoute(ctxT(t), f.addr, "orders")
	assert.ErrorIs(t, err, ErrUnauthorized)
	assert.False(t, Retryable(err))
	assert.Less(t, time.Since(start), liveness/2)
}

func TestTelemetryReopensAndResendsSettings(t *testing.T) {
	f := startFake(t, nil)
	reg := prometheus.NewRegistry()
	c := newTestClient(t, Config{Type: Producer, Topics: []string{"orders"}, Registerer: reg})
	require.NoError(t, c.Connect(ctxT(t), f.addr))
	f.kickTelemetry()
	require.Eventually(t, func() bool { return f.count(func(f *fakeServer) int { return len(f.settings) }) >= 2 },
		liveness, 10*time.Millisecond, "settings must be resent on a new stream")
	assert.GreaterOrEqual(t, testutil.ToFloat64(c.met.reconnects), 1.0)

	// The reopened stream still serves commands.
	require.Eventually(t, func() bool { return f.count(func(f *fakeServer) int { return len(f.streams) }) >= 2 }, liveness, 10*time.Millisecond)
	require.NoError(t, c.SetTopics([]string{"orders", "more"}))
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		last := f.settings[len(f.settings)-1]
		return len(last.GetPublishing().GetTopics()) == 2
	}, liveness, 10*time.Millisecond)
}

func TestServerCommandsAreAnswered(t *testing.T) {
	f := startFake(t, nil)
	resolved := make(chan string, 1)
	c := newTestClient(t, Config{Type: Producer, Topics: []string{"orders"},
		OnOrphanedTransaction: func(_ context.Context, endpoint string, msg *ReceivedMessage, txID string) TransactionResolution {
			resolved <- endpoint + "|" + msg.ID + "|" + txID
			return TransactionCommit
		}})
	require.NoError(t, c.Connect(ctxT(t), f.addr))

	f.push(t, &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_PrintThreadStackTraceCommand{
		PrintThreadStackTraceCommand: &rmqpb.PrintThreadStackTraceCommand{Nonce: "n1"}}})
	f.push(t, &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_VerifyMessageCommand{
		VerifyMessageCommand: &rmqpb.VerifyMessageCommand{Nonce: "n2", Message: wireMessage("m", []byte("x"))}}})
	f.push(t, &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_RecoverOrphanedTransactionCommand{
		RecoverOrphanedTransactionCommand: &rmqpb.RecoverOrphanedTransactionCommand{Message: wireMessage("half-1", []byte("x")), TransactionId: "tx-9"}}})

	select {
	case got := <-resolved:
		assert.Equal(t, f.addr+"|half-1|tx-9", got)
	case <-time.After(liveness):
		t.Fatal("orphan resolver not called")
	}
	require.Eventually(t, func() bool { return f.count(func(f *fakeServer) int { return len(f.endTx) }) == 1 }, liveness, 10*time.Millisecond)
	tx := f.endTx[0]
	assert.Equal(t, rmqpb.TransactionSource_SOURCE_SERVER_CHECK, tx.GetSource())
	assert.Equal(t, rmqpb.TransactionResolution_COMMIT, tx.GetResolution())
	assert.Equal(t, "tx-9", tx.GetTransactionId())
	assert.Equal(t, "half-1", tx.GetMessageId())
	assert.Equal(t, "orders", tx.GetTopic().GetName())

	require.Eventually(t, func() bool { return f.count(func(f *fakeServer) int { return len(f.replies) }) == 2 }, liveness, 10*time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.replies {
		switch {
		case r.GetThreadStackTrace() != nil:
			assert.Equal(t, "n1", r.GetThreadStackTrace().GetNonce())
			assert.Contains(t, r.GetThreadStackTrace().GetThreadStackTrace(), "goroutine")
			assert.Equal(t, rmqpb.Code_OK, r.GetStatus().GetCode())
		case r.GetVerifyMessageResult() != nil:
			assert.Equal(t, "n2", r.GetVerifyMessageResult().GetNonce())
			assert.Equal(t, rmqpb.Code_NOT_IMPLEMENTED, r.GetStatus().GetCode())
		default:
			t.Fatalf("unexpected reply %v", r)
		}
	}
}

func TestSendSingleAndBatch(t *testing.T) {
	f := startFake(t, nil)
	c := newTestClient(t, producerConfig())
	ctx := ctxT(t)
	delay := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	res, err := c.Send(ctx, f.addr, []*Message{{Topic: "orders", Tag: "paid", Keys: []string{"k"}, Body: []byte("hello"),
		Properties: map[string]string{"lane": "a"}, QueueID: 1, DeliveryTime: delay}})
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Len(t, res[0].MessageID, 34)
	assert.Equal(t, int64(100), res[0].Offset)
	assert.Equal(t, int32(1), res[0].QueueID)

	sent := f.sends[0].GetMessages()[0]
	assert.Equal(t, res[0].MessageID, sent.GetSystemProperties().GetMessageId())
	assert.Equal(t, "paid", sent.GetSystemProperties().GetTag())
	assert.Equal(t, rmqpb.MessageType_DELAY, sent.GetSystemProperties().GetMessageType())
	assert.Equal(t, delay, sent.GetSystemProperties().GetDeliveryTimestamp().AsTime().Local())
	assert.Equal(t, int32(1), sent.GetSystemProperties().GetQueueId())
	assert.Equal(t, "a", sent.GetUserProperties()["lane"])
	assert.NotEmpty(t, sent.GetSystemProperties().GetBornHost())
	assert.NotNil(t, sent.GetSystemProperties().GetBornTimestamp())

	// The proxy's batch shape: one entry for the batch.
	f.onSend = func(req *rmqpb.SendMessageRequest) *rmqpb.SendMessageResponse {
		var ids []string
		for _, m := range req.GetMessages() {
			ids = append(ids, m.GetSystemProperties().GetMessageId())
		}
		return &rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: ok(), MessageId: strings.Join(ids, ","), Offset: 500}}}
	}
	batch := []*Message{{Topic: "orders", Body: []byte("1"), ID: "mine"}, {Topic: "orders", Body: []byte("2")}, {Topic: "orders", Body: []byte("3")}}
	res, err = c.Send(ctx, f.addr, batch)
	require.NoError(t, err)
	require.Len(t, res, 3)
	assert.Equal(t, "mine", res[0].MessageID)
	assert.Equal(t, "", batch[1].ID, "caller's messages are not modified")
	for i, r := range res {
		assert.Equal(t, int64(500+i), r.Offset)
	}

	// Rejections: top-level code, client-side checks.
	f.onSend = func(*rmqpb.SendMessageRequest) *rmqpb.SendMessageResponse {
		return &rmqpb.SendMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, Message: "type"}}
	}
	_, err = c.Send(ctx, f.addr, batch)
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = c.Send(ctx, f.addr, nil)
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = c.Send(ctx, f.addr, []*Message{{Topic: "orders", Body: []byte("a")}, {Topic: "other", Body: []byte("b")}})
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = c.Send(ctx, f.addr, []*Message{{Topic: "orders"}})
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = c.Send(ctx, f.addr, []*Message{{Topic: "orders", Body: make([]byte, 4<<20+1)}})
	assert.ErrorIs(t, err, ErrTooLarge, "the server-pushed max body size is enforced")
	_, err = c.Send(ctx, f.addr, []*Message{{Topic: "orders", Body: []byte("x"), Transactional: true, Group: "g"}})
	assert.ErrorIs(t, err, ErrBadRequest)
}

func TestSendToDeadEndpointIsRetryable(t *testing.T) {
	c := newTestClient(t, producerConfig())
	_, err := c.Send(ctxT(t), "127.0.0.1:1", []*Message{{Topic: "orders", Body: []byte("x")}})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.True(t, Retryable(err))
	_, err = c.Send(ctxT(t), "no-port", []*Message{{Topic: "orders", Body: []byte("x")}})
	assert.ErrorIs(t, err, ErrBadRequest)
}

func TestTransactionalSendAndEnd(t *testing.T) {
	f := startFake(t, func(f *fakeServer) {
		f.onSend = func(req *rmqpb.SendMessageRequest) *rmqpb.SendMessageResponse {
			return &rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: ok(),
				MessageId: req.GetMessages()[0].GetSystemProperties().GetMessageId(), TransactionId: "tx-1", Offset: 3}}}
		}
	})
	c := newTestClient(t, producerConfig())
	res, err := c.Send(ctxT(t), f.addr, []*Message{{Topic: "orders", Body: []byte("x"), Transactional: true, OrphanRecovery: 5 * time.Second}})
	require.NoError(t, err)
	assert.Equal(t, "tx-1", res[0].TransactionID)
	sp := f.sends[0].GetMessages()[0].GetSystemProperties()
	assert.Equal(t, rmqpb.MessageType_TRANSACTION, sp.GetMessageType())
	assert.Equal(t, 5*time.Second, sp.GetOrphanedTransactionRecoveryDuration().AsDuration())

	require.NoError(t, c.EndTransaction(ctxT(t), f.addr, "orders", res[0].MessageID, "tx-1", TransactionRollback))
	assert.Equal(t, rmqpb.TransactionSource_SOURCE_CLIENT, f.endTx[0].GetSource())
	assert.Equal(t, rmqpb.TransactionResolution_ROLLBACK, f.endTx[0].GetResolution())
	assert.ErrorIs(t, c.EndTransaction(ctxT(t), f.addr, "orders", "m", "", TransactionCommit), ErrBadRequest)

	id, err := c.RecallMessage(ctxT(t), f.addr, "orders", "rh")
	require.NoError(t, err)
	assert.Equal(t, "recalled-rh", id)
}

func TestRouteCacheAndRefresh(t *testing.T) {
	calls := 0
	f := startFake(t, nil)
	f.onRoute = func(req *rmqpb.QueryRouteRequest) *rmqpb.QueryRouteResponse {
		calls++
		assert.Equal(t, rmqpb.AddressScheme_IPv4, req.GetEndpoints().GetScheme())
		other := &rmqpb.Endpoints{Scheme: rmqpb.AddressScheme_IPv4, Addresses: []*rmqpb.Address{{Host: "127.0.0.2", Port: 9}}}
		return &rmqpb.QueryRouteResponse{Status: ok(), MessageQueues: []*rmqpb.MessageQueue{
			{Topic: req.GetTopic(), Id: 0, Permission: rmqpb.Permission_READ_WRITE, Broker: &rmqpb.Broker{Name: "a", Endpoints: req.GetEndpoints()}},
			{Topic: req.GetTopic(), Id: 1, Permission: rmqpb.Permission_READ, Broker: &rmqpb.Broker{Name: "b", Endpoints: other},
				AcceptMessageTypes: []rmqpb.MessageType{rmqpb.MessageType_FIFO}},
			{Topic: req.GetTopic(), Id: 0, Permission: rmqpb.Permission_READ_WRITE, Broker: &rmqpb.Broker{Name: "a", Id: 1, Endpoints: other}},
			{Topic: req.GetTopic(), Id: 2, Permission: rmqpb.Permission_WRITE, Broker: &rmqpb.Broker{Name: "c"}},
		}}
	}
	c := newTestClient(t, producerConfig())
	ctx := ctxT(t)
	r1, err := c.Route(ctx, f.addr, "orders")
	require.NoError(t, err)
	r2, err := c.Route(ctx, f.addr, "orders")
	require.NoError(t, err)
	assert.Same(t, r1, r2)
	assert.Equal(t, 1, calls)
	assert.Equal(t, []string{f.addr, "127.0.0.2:9"}, r1.Endpoints())
	w := r1.WritableQueues()
	require.Len(t, w, 2)
	assert.Equal(t, "a", w[0].Broker)
	assert.Equal(t, f.addr, w[1].Endpoint, "a queue without an address is served by the access point")
	rd := r1.ReadableQueues()
	require.Len(t, rd, 2)
	assert.True(t, rd[1].Accepts(TypeFIFO))
	assert.False(t, rd[1].Accepts(TypeNormal))
	assert.True(t, rd[0].Accepts(TypeDelay))

	r3, err := c.RefreshRoute(ctx, f.addr, "orders")
	require.NoError(t, err)
	assert.NotSame(t, r1, r3)
	assert.Equal(t, 2, calls)

	f.onRoute = func(*rmqpb.QueryRouteRequest) *rmqpb.QueryRouteResponse {
		return &rmqpb.QueryRouteResponse{Status: &rmqpb.Status{Code: rmqpb.Code_TOPIC_NOT_FOUND, Message: "no topic"}}
	}
	_, err = c.Route(ctx, f.addr, "missing")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestRoutesRefreshInTheBackground(t *testing.T) {
	f := startFake(t, nil)
	c := newTestClient(t, Config{Type: Producer, RouteRefreshInterval: 30 * time.Millisecond})
	r1, err := c.Route(ctxT(t), f.addr, "orders")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, _ := c.Route(ctxT(t), f.addr, "orders")
		return r != r1
	}, liveness, 10*time.Millisecond)
}

func TestFailedRoutesAreNotRefreshedInTheBackground(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	f := startFake(t, nil)
	f.onRoute = func(req *rmqpb.QueryRouteRequest) *rmqpb.QueryRouteResponse {
		mu.Lock()
		asked[req.GetTopic().GetName()]++
		mu.Unlock()
		if req.GetTopic().GetName() == "missing" {
			return &rmqpb.QueryRouteResponse{Status: &rmqpb.Status{Code: rmqpb.Code_TOPIC_NOT_FOUND, Message: "no topic"}}
		}
		return &rmqpb.QueryRouteResponse{Status: ok(), MessageQueues: []*rmqpb.MessageQueue{{
			Topic: req.GetTopic(), Permission: rmqpb.Permission_READ_WRITE, Broker: &rmqpb.Broker{Name: "a"},
		}}}
	}
	c := newTestClient(t, Config{Type: Producer, RouteRefreshInterval: 10 * time.Millisecond})
	_, err := c.Route(ctxT(t), f.addr, "missing")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = c.Route(ctxT(t), f.addr, "orders")
	require.NoError(t, err)
	// Once "orders" was refreshed several times, the loop has had as many
	// chances to refresh "missing".
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return asked["orders"] >= 5
	}, liveness, 5*time.Millisecond)
	mu.Lock()
	assert.Equal(t, 1, asked["missing"], "a topic whose route never resolved is not queried in the background")
	mu.Unlock()
	// A later Route asks again.
	_, err = c.Route(ctxT(t), f.addr, "missing")
	require.ErrorIs(t, err, ErrNotFound)
	mu.Lock()
	assert.Equal(t, 2, asked["missing"])
	mu.Unlock()
}

func TestReceiveAckChangeAndDLQ(t *testing.T) {
	f := startFake(t, nil)
	f.onReceive = func(req *rmqpb.ReceiveMessageRequest, s rmqpb.MessagingService_ReceiveMessageServer) error {
		_ = s.Send(statusFrame(rmqpb.Code_OK))
		_ = s.Send(msgFrame(wireMessage("m1", []byte("one"))))
		_ = s.Send(msgFrame(wireMessage("m2", []byte("two"))))
		return s.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.Now()}})
	}
	c := newTestClient(t, consumerConfig())
	ctx := ctxT(t)
	route, err := c.Route(ctx, f.addr, "orders")
	require.NoError(t, err)
	msgs, err := c.Receive(ctx, ReceiveRequest{Queue: route.ReadableQueues()[0], Filter: Filter{Expression: "paid"},
		InvisibleDuration: 30 * time.Second, LongPollingTimeout: 2 * time.Second, AttemptID: "att-1"})
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	assert.Equal(t, f.addr, msgs[0].Endpoint)

	req := f.receives[0]
	assert.Equal(t, "g1", req.GetGroup().GetName())
	assert.Equal(t, int32(16), req.GetBatchSize(), "server-pushed batch size")
	assert.Equal(t, 30*time.Second, req.GetInvisibleDuration().AsDuration())
	assert.Equal(t, 2*time.Second, req.GetLongPollingTimeout().AsDuration())
	assert.Equal(t, "att-1", req.GetAttemptId())
	assert.Equal(t, "paid", req.GetFilterExpression().GetExpression())
	assert.Equal(t, rmqpb.FilterType_TAG, req.GetFilterExpression().GetType())
	assert.Equal(t, "broker-a", req.GetMessageQueue().GetBroker().GetName())
	// Deadline = long polling + request timeout.
	assert.InDelta(t, (5 * time.Second).Seconds(), f.deadlines[0].Seconds(), 1.0)

	errs, err := c.Ack(ctx, f.addr, "orders", []AckEntry{{MessageID: "m1", ReceiptHandle: msgs[0].ReceiptHandle}, {MessageID: "m2", ReceiptHandle: msgs[1].ReceiptHandle}})
	require.NoError(t, err)
	assert.Equal(t, []error{nil, nil}, errs)

	f.onAck = func(req *rmqpb.AckMessageRequest) *rmqpb.AckMessageResponse {
		return &rmqpb.AckMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_MULTIPLE_RESULTS}, Entries: []*rmqpb.AckMessageResultEntry{
			{ReceiptHandle: req.GetEntries()[1].GetReceiptHandle(), Status: &rmqpb.Status{Code: rmqpb.Code_INVALID_RECEIPT_HANDLE}},
			{ReceiptHandle: req.GetEntries()[0].GetReceiptHandle(), Status: ok()},
		}}
	}
	errs, err = c.Ack(ctx, f.addr, "orders", []AckEntry{{MessageID: "m1", ReceiptHandle: "a"}, {MessageID: "m2", ReceiptHandle: "b"}})
	require.NoError(t, err)
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], ErrBadRequest, "results are matched by receipt handle")

	h, err := c.ChangeInvisibleDuration(ctx, f.addr, "orders", "rh-m1", "m1", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "rh-m1-renewed-10s", h)

	require.NoError(t, c.ForwardToDeadLetterQueue(ctx, f.addr, DeadLetter{Topic: "orders", ReceiptHandle: "rh", MessageID: "m1", DeliveryAttempt: 3, MaxDeliveryAttempts: 3}))
	assert.ErrorIs(t, c.ForwardToDeadLetterQueue(ctx, f.addr, DeadLetter{Topic: "orders", ReceiptHandle: "bad"}), ErrBadRequest)

	as, err := c.QueryAssignment(ctx, f.addr, "orders")
	require.NoError(t, err)
	require.Len(t, as, 1)
	assert.Equal(t, int32(-1), as[0].ID)
	assert.Equal(t, f.addr, as[0].Endpoint)

	// Empty receive.
	f.onReceive = nil
	msgs, err = c.Receive(ctx, ReceiveRequest{Queue: as[0], AutoRenew: true})
	require.NoError(t, err)
	assert.Empty(t, msgs)
	assert.Nil(t, f.receives[1].InvisibleDuration)
	assert.True(t, f.receives[1].GetAutoRenew())
	assert.Equal(t, 5*time.Second, f.receives[1].GetLongPollingTimeout().AsDuration(), "server-pushed long polling")

	_, err = c.Receive(ctx, ReceiveRequest{Queue: as[0]})
	assert.ErrorIs(t, err, ErrBadRequest, "invisible duration is required without auto renew")
}

func TestConsumerSettingsAndHeartbeats(t *testing.T) {
	f := startFake(t, nil)
	c := newTestClient(t, Config{Type: PushConsumer, Group: "g1", HeartbeatInterval: 20 * time.Millisecond,
		Subscriptions: []Subscription{{Topic: "orders", Filter: Filter{Type: FilterSQL, Expression: "a > 1"}}, {Topic: "audit"}}})
	require.NoError(t, c.Connect(ctxT(t), f.addr))
	sub := f.settings[0].GetSubscription()
	assert.Equal(t, rmqpb.ClientType_PUSH_CONSUMER, f.settings[0].GetClientType())
	assert.Equal(t, "g1", sub.GetGroup().GetName())
	require.Len(t, sub.GetSubscriptions(), 2)
	assert.Equal(t, rmqpb.FilterType_SQL, sub.GetSubscriptions()[0].GetExpression().GetType())
	assert.Equal(t, "*", sub.GetSubscriptions()[1].GetExpression().GetExpression())

	ss, ok := c.ServerSettings(f.addr)
	require.True(t, ok)
	assert.Equal(t, 16, ss.ReceiveBatchSize)
	assert.Equal(t, 5*time.Second, ss.LongPollingTimeout)

	require.Eventually(t, func() bool { return f.count(func(f *fakeServer) int { return len(f.heartbeats) }) >= 2 }, liveness, 10*time.Millisecond)
	hb := f.heartbeats[0]
	assert.Equal(t, "g1", hb.GetGroup().GetName())
	assert.Equal(t, rmqpb.ClientType_PUSH_CONSUMER, hb.GetClientType())

	_, err := c.Send(ctxT(t), f.addr, []*Message{{Topic: "orders", Body: []byte("x")}})
	require.NoError(t, err, "the driver does not police roles for sends; the server does")
	_, err = c.Ack(ctxT(t), f.addr, "", []AckEntry{{ReceiptHandle: "x"}})
	assert.ErrorIs(t, err, ErrBadRequest)
}

func TestCloseNotifiesAndRejectsLaterCalls(t *testing.T) {
	f := startFake(t, nil)
	c, err := New(consumerConfig())
	require.NoError(t, err)
	require.NoError(t, c.Connect(ctxT(t), f.addr))
	require.NoError(t, c.Close(ctxT(t)))
	require.Equal(t, 1, f.count(func(f *fakeServer) int { return len(f.terminations) }))
	assert.Equal(t, "g1", f.terminations[0].GetGroup().GetName())
	assert.Equal(t, []string{c.ID()}, f.lastHeader("NotifyClientTermination").Get("x-mq-client-id"))
	_, err = c.QueryRoute(ctxT(t), f.addr, "orders")
	assert.ErrorIs(t, err, ErrClosed)
	assert.NoError(t, c.Close(ctxT(t)))
}

func TestUnknownServerCodeIsUnsupported(t *testing.T) {
	f := startFake(t, nil)
	f.onRoute = func(*rmqpb.QueryRouteRequest) *rmqpb.QueryRouteResponse {
		return &rmqpb.QueryRouteResponse{Status: &rmqpb.Status{Code: rmqpb.Code(77777), Message: "future"}}
	}
	c := newTestClient(t, producerConfig())
	_, err := c.QueryRoute(ctxT(t), f.addr, "orders")
	var de *Error
	require.True(t, errors.As(err, &de))
	assert.Equal(t, rmqpb.Code(77777), de.Code)
	assert.ErrorIs(t, err, ErrUnsupported)
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	f := startFake(t, nil)
	before := runtime.NumGoroutine()
	c, err := New(Config{Type: Producer, HeartbeatInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	_, err = c.Send(ctxT(t), f.addr, []*Message{{Topic: "orders", Body: []byte("x")}})
	require.NoError(t, err)
	_, _ = c.Send(ctxT(t), "127.0.0.1:1", []*Message{{Topic: "orders", Body: []byte("x")}})
	require.NoError(t, c.Close(ctxT(t)))
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before }, liveness, 20*time.Millisecond,
		"goroutines: before %d, now %d", before, runtime.NumGoroutine())
}
