package broker

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

func closeBroker(t *testing.T, b *Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Close(ctx))
}

func TestRestartKeepsConsumerProgress(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.CheckpointInterval = time.Hour // only Close writes progress here
	b, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Start(ctx))
	c := dial(t, b.Addr(), "client-restart")
	var batch []*rmqpb.Message
	for i := 0; i < 10; i++ {
		m := msg("normal", "r-"+fmtInt(int64(i)), "x")
		m.SystemProperties.QueueId = 0
		batch = append(batch, m)
	}
	require.Equal(t, rmqpb.Code_OK, c.send(batch...).GetStatus().GetCode())
	var got []*rmqpb.Message
	for end := time.Now().Add(10 * time.Second); len(got) < 10 && time.Now().Before(end); {
		got = append(got, c.receive("g1", "normal", 32, 30*time.Second, time.Second).messages...)
	}
	require.Len(t, got, 10)
	// Ack 0..5 and 8; 6, 7 and 9 stay in flight.
	for _, i := range []int{0, 1, 2, 3, 4, 5, 8} {
		require.Equal(t, rmqpb.Code_OK, c.ack("g1", "normal", got[i]).GetStatus().GetCode())
	}
	addr := b.Addr()
	closeBroker(t, b)

	cfg.Listen = addr
	b2 := startBroker(t, cfg)
	require.Equal(t, addr, b2.Addr(), "same port")
	// A handle from before the restart still acks.
	assert.Equal(t, rmqpb.Code_OK, c.ack("g1", "normal", got[6]).GetStatus().GetCode())
	// Acked handles stay acked: acking again is OK and changes nothing
	// (checked below: nothing acked comes back).
	assert.Equal(t, rmqpb.Code_OK, c.ack("g1", "normal", got[0]).GetStatus().GetCode())
	// Nack 7: it comes back with its attempts counted; 9 stays invisible;
	// nothing acked comes back.
	require.Equal(t, rmqpb.Code_OK, c.change("g1", "normal", got[7].GetSystemProperties().GetReceiptHandle(), 0).GetStatus().GetCode())
	var again []*rmqpb.Message
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		r := c.receive("g1", "normal", 32, 30*time.Second, 200*time.Millisecond)
		again = append(again, r.messages...)
	}
	require.Equal(t, []string{"r-7"}, ids(again))
	assert.Equal(t, int32(2), again[0].GetSystemProperties().GetDeliveryAttempt())
}

// A crash loses at most the acks made after the last checkpoint: those
// messages come again, and nothing acked before it does.
func TestCrashLosesOnlyUncheckpointedAcks(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	b, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Start(ctx))
	c := dial(t, b.Addr(), "client-ckpt")
	first := c.sendN("normal", 4)
	require.ElementsMatch(t, first, ids(c.drain("g1", "normal", 4, 10*time.Second)))
	// The periodic checkpoint (50 ms here) records the acks without Close.
	require.Eventually(t, func() bool { return b.progressSaved.Load() == b.progressVer.Load() }, 5*time.Second, 10*time.Millisecond)
	snap, err := os.ReadFile(b.progressPath())
	require.NoError(t, err)

	second := c.sendN("normal", 2)
	require.ElementsMatch(t, second, ids(c.drain("g1", "normal", 2, 10*time.Second)))
	closeBroker(t, b)
	// The crash: the checkpoint on disk is the one from before the last acks.
	require.NoError(t, os.WriteFile(b.progressPath(), snap, 0o644))

	cfg.Listen = b.Addr()
	b2 := startBroker(t, cfg)
	c2 := dial(t, b2.Addr(), "client-ckpt-2")
	var again []string
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		r := c2.receive("g1", "normal", 32, 30*time.Second, 200*time.Millisecond)
		c2.ack("g1", "normal", r.messages...)
		again = append(again, ids(r.messages)...)
	}
	assert.ElementsMatch(t, second, again)
}

func TestTelemetrySettingsAndCommands(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-tel")
	ctx, cancel := c.ctx(10 * time.Second)
	defer cancel()

	hb, err := c.rpc.Heartbeat(ctx, &rmqpb.HeartbeatRequest{ClientType: rmqpb.ClientType_PRODUCER})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_UNRECOGNIZED_CLIENT_TYPE, hb.GetStatus().GetCode(), "no Settings yet")

	tel, err := c.rpc.Telemetry(ctx)
	require.NoError(t, err)
	require.NoError(t, tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType:     rmqpb.ClientType_PRODUCER.Enum(),
		RequestTimeout: durationpb.New(3 * time.Second),
		PubSub:         &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res("normal")}}},
	}}}))
	reply, err := tel.Recv()
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, reply.GetStatus().GetCode())
	s := reply.GetSettings()
	assert.Equal(t, int32(3), s.GetBackoffPolicy().GetMaxAttempts())
	assert.Equal(t, 10*time.Millisecond, s.GetBackoffPolicy().GetExponentialBackoff().GetInitial().AsDuration())
	assert.Equal(t, int32(4<<20), s.GetPublishing().GetMaxBodySize())
	assert.True(t, s.GetPublishing().GetValidateMessageType())
	assert.Equal(t, 3*time.Second, s.GetRequestTimeout().AsDuration())

	hb, err = c.rpc.Heartbeat(ctx, &rmqpb.HeartbeatRequest{ClientType: rmqpb.ClientType_PRODUCER})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_OK, hb.GetStatus().GetCode())
	assert.Equal(t, []string{"client-tel"}, b.Producers("normal"))
	assert.Empty(t, b.Producers("mixed"))

	// Server commands reach the client over its stream.
	cmd := &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_PrintThreadStackTraceCommand{
		PrintThreadStackTraceCommand: &rmqpb.PrintThreadStackTraceCommand{Nonce: "n-1"}}}
	require.NoError(t, b.SendCommand(ctx, "client-tel", cmd))
	in, err := tel.Recv()
	require.NoError(t, err)
	assert.Equal(t, "n-1", in.GetPrintThreadStackTraceCommand().GetNonce())
	err = b.SendCommand(ctx, "nobody", cmd)
	assert.True(t, errors.Is(err, ErrClientNotConnected))

	nt, err := c.rpc.NotifyClientTermination(ctx, &rmqpb.NotifyClientTerminationRequest{})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_OK, nt.GetStatus().GetCode())
	require.NoError(t, tel.CloseSend())
	_, err = tel.Recv()
	assert.ErrorIs(t, err, io.EOF)
}

func TestTelemetryConsumerSettings(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-tel-consumer")
	ctx, cancel := c.ctx(10 * time.Second)
	defer cancel()
	tel, err := c.rpc.Telemetry(ctx)
	require.NoError(t, err)
	require.NoError(t, tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: rmqpb.ClientType_PUSH_CONSUMER.Enum(),
		PubSub: &rmqpb.Settings_Subscription{Subscription: &rmqpb.Subscription{
			Group:         res("gfifo"),
			Subscriptions: []*rmqpb.SubscriptionEntry{{Topic: res("fifo"), Expression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}}},
		}},
	}}}))
	reply, err := tel.Recv()
	require.NoError(t, err)
	sub := reply.GetSettings().GetSubscription()
	assert.True(t, sub.GetFifo())
	assert.Equal(t, int32(32), sub.GetReceiveBatchSize())
	assert.Equal(t, 20*time.Second, sub.GetLongPollingTimeout().AsDuration())
	assert.Equal(t, int32(5), reply.GetSettings().GetBackoffPolicy().GetMaxAttempts())
	assert.Equal(t, time.Second, reply.GetSettings().GetBackoffPolicy().GetCustomizedBackoff().GetNext()[0].AsDuration())

	hb, err := c.rpc.Heartbeat(ctx, &rmqpb.HeartbeatRequest{Group: res("bad group"), ClientType: rmqpb.ClientType_PUSH_CONSUMER})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_ILLEGAL_CONSUMER_GROUP, hb.GetStatus().GetCode())
	hb, err = c.rpc.Heartbeat(ctx, &rmqpb.HeartbeatRequest{Group: res("gfifo"), ClientType: rmqpb.ClientType_PUSH_CONSUMER})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_OK, hb.GetStatus().GetCode())

	// The remoting language name is required, as the proxy parses it.
	bad := dial(t, b.Addr(), "")
	badCtx, badCancel := context.WithTimeout(metadataCtx(context.Background(), "client-golang"), 5*time.Second)
	defer badCancel()
	badCtx = metadata.AppendToOutgoingContext(badCtx, "x-mq-language", "GOLANG")
	hb, err = bad.rpc.Heartbeat(badCtx, &rmqpb.HeartbeatRequest{Group: res("gfifo")})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, hb.GetStatus().GetCode())
	tel3, err := bad.rpc.Telemetry(badCtx)
	require.NoError(t, err)
	require.NoError(t, tel3.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: rmqpb.ClientType_PRODUCER.Enum(), PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{}},
	}}}))
	_, err = tel3.Recv()
	assert.Equal(t, codes.Internal, grpcstatus.Code(err))

	// Settings with neither publishing nor subscription end the stream with
	// INVALID_ARGUMENT, as the proxy does.
	tel2, err := c.rpc.Telemetry(ctx)
	require.NoError(t, err)
	require.NoError(t, tel2.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: rmqpb.ClientType_SIMPLE_CONSUMER.Enum(),
	}}}))
	_, err = tel2.Recv()
	assert.Equal(t, codes.InvalidArgument, grpcstatus.Code(err))
}

func TestAutoRenewWhileClientLives(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Limits.AutoRenewSlice = 300 * time.Millisecond
	cfg.Limits.AutoRenewAhead = 200 * time.Millisecond
	b := startBroker(t, cfg)
	c := dial(t, b.Addr(), "client-renew")
	c.sendN("normal", 1)
	req := &rmqpb.ReceiveMessageRequest{
		Group: res("g1"), MessageQueue: &rmqpb.MessageQueue{Topic: res("normal"), Id: -1},
		FilterExpression: &rmqpb.FilterExpression{Expression: "*"}, BatchSize: 1, AutoRenew: true,
		LongPollingTimeout: durationpb.New(2 * time.Second),
	}
	r := c.receiveReq(req, 5*time.Second)
	require.Len(t, r.messages, 1)
	// Well past the 300 ms slice, the client is alive: the message stays
	// with it and its handle still acks.
	time.Sleep(time.Second)
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, c.receive("g1", "normal", 1, time.Second, 100*time.Millisecond).status.GetCode())
	assert.Equal(t, rmqpb.Code_OK, c.ack("g1", "normal", r.messages[0]).GetStatus().GetCode())
}

func TestFaults(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	f := &Faults{}
	cfg.Faults = f
	b := startBroker(t, cfg)
	c := dial(t, b.Addr(), "client-faults")
	route := func(d time.Duration) (*rmqpb.QueryRouteResponse, error) {
		ctx, cancel := c.ctx(d)
		defer cancel()
		return c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("normal")})
	}
	f.FailNext(2)
	for i := 0; i < 2; i++ {
		_, err := route(5 * time.Second)
		assert.Equal(t, codes.Unavailable, grpcstatus.Code(err))
	}
	resp, err := route(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())

	f.FailNextWithStatus(1, rmqpb.Code_INTERNAL_SERVER_ERROR)
	resp, err = route(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, resp.GetStatus().GetCode())
	assert.Empty(t, resp.GetMessageQueues())
	f.FailNextWithStatus(1, rmqpb.Code_INTERNAL_SERVER_ERROR)
	r := c.receive("g1", "normal", 1, time.Second, 100*time.Millisecond)
	assert.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, r.status.GetCode())
	assert.True(t, r.tail)

	f.Pause()
	assert.True(t, f.Paused())
	_, err = route(200 * time.Millisecond)
	assert.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(err))
	done := make(chan error, 1)
	go func() { _, err := route(10 * time.Second); done <- err }()
	time.Sleep(100 * time.Millisecond)
	f.Resume()
	require.NoError(t, <-done)

	f.SetLatency(300 * time.Millisecond)
	_, err = route(100 * time.Millisecond)
	assert.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(err))
	f.SetLatency(0)
	_, err = route(5 * time.Second)
	require.NoError(t, err)
}

func TestMetrics(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	b := startBroker(t, cfg)
	c := dial(t, b.Addr(), "client-metrics")
	c.sendN("normal", 3)
	c.drain("g1", "normal", 3, 10*time.Second)
	assert.Equal(t, 3.0, testutil.ToFloat64(b.met.messagesIn))
	assert.Equal(t, 3.0, testutil.ToFloat64(b.met.messagesOut))
	assert.Equal(t, 3.0, testutil.ToFloat64(b.met.requests.WithLabelValues("SendMessage", "OK")))
	// A second broker on the same registry (another name) registers fine; a
	// restarted one reuses the collectors.
	cfg2 := testConfig(t, t.TempDir())
	cfg2.Name = "b9"
	cfg2.Registerer = reg
	startBroker(t, cfg2)
	cfg3 := testConfig(t, t.TempDir())
	cfg3.Registerer = reg
	b3, err := New(cfg3)
	require.NoError(t, err)
	assert.Same(t, b.met.messagesIn, b3.met.messagesIn)
}

func TestConfigValidation(t *testing.T) {
	base := func() Config { return Config{Name: "b", DataDir: t.TempDir()} }
	for name, mod := range map[string]func(*Config){
		"no name":        func(c *Config) { c.Name = "" },
		"no dir":         func(c *Config) { c.DataDir = "" },
		"bad listen":     func(c *Config) { c.Listen = "nope" },
		"bad topic":      func(c *Config) { c.Topics = []Topic{{Name: "a b"}} },
		"dup topic":      func(c *Config) { c.Topics = []Topic{{Name: "a"}, {Name: "a"}} },
		"queues":         func(c *Config) { c.Topics = []Topic{{Name: "a", Queues: 5000}} },
		"type":           func(c *Config) { c.Topics = []Topic{{Name: "a", Type: MessageType(9)}} },
		"bad group":      func(c *Config) { c.Groups = []Group{{Name: ""}} },
		"attempts":       func(c *Config) { c.Groups = []Group{{Name: "g", MaxDeliveryAttempts: -1}} },
		"bad peer":       func(c *Config) { c.Peers = []Peer{{Name: "p", Endpoint: "nohost"}} },
		"negative retry": func(c *Config) { c.Groups = []Group{{Name: "g", RetryBackoff: []time.Duration{-1}}} },
	} {
		t.Run(name, func(t *testing.T) {
			c := base()
			mod(&c)
			_, err := New(c)
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	typ, err := ParseMessageType("FIFO")
	require.NoError(t, err)
	assert.Equal(t, TypeFIFO, typ)
	_, err = ParseMessageType("fifo")
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_ = proto.String
}

func TestCloseReleasesPausedCalls(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Faults = &Faults{}
	b, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, b.Start(context.Background()))
	c := dial(t, b.Addr(), "client-paused")
	cfg.Faults.Pause()
	held := make(chan error, 1)
	go func() {
		ctx, cancel := c.ctx(30 * time.Second)
		defer cancel()
		_, err := c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("normal")})
		held <- err
	}()
	time.Sleep(100 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on a paused call")
	}
	assert.Equal(t, codes.Unavailable, grpcstatus.Code(<-held))
}

func TestAutoRenewStopsWhenClientVanishes(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Limits.AutoRenewSlice = 300 * time.Millisecond
	cfg.Limits.AutoRenewAhead = 200 * time.Millisecond
	cfg.Limits.ClientIdle = 300 * time.Millisecond
	b := startBroker(t, cfg)
	a := dial(t, b.Addr(), "client-vanishing")
	a.sendN("normal", 1)
	r := a.receiveReq(&rmqpb.ReceiveMessageRequest{
		Group: res("g1"), MessageQueue: &rmqpb.MessageQueue{Topic: res("normal"), Id: -1},
		FilterExpression: &rmqpb.FilterExpression{Expression: "*"}, BatchSize: 1, AutoRenew: true,
		LongPollingTimeout: durationpb.New(2 * time.Second),
	}, 5*time.Second)
	require.Len(t, r.messages, 1)
	// Client a is never heard of again: its message is handed back.
	other := dial(t, b.Addr(), "client-survivor")
	var again []*rmqpb.Message
	for end := time.Now().Add(10 * time.Second); len(again) == 0 && time.Now().Before(end); {
		again = other.receive("g1", "normal", 1, 10*time.Second, time.Second).messages
	}
	require.Len(t, again, 1)
	assert.Equal(t, int32(2), again[0].GetSystemProperties().GetDeliveryAttempt())
}

func TestStrictGroups(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.StrictGroups = true
	b := startBroker(t, cfg)
	c := dial(t, b.Addr(), "client-strict")
	r := c.receive("unknown-group", "normal", 1, time.Second, 100*time.Millisecond)
	assert.Equal(t, rmqpb.Code_CONSUMER_GROUP_NOT_FOUND, r.status.GetCode())
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, c.receive("g1", "normal", 1, time.Second, 100*time.Millisecond).status.GetCode())
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res(DLQTopic("unknown-group"))})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_TOPIC_NOT_FOUND, resp.GetStatus().GetCode())
}

func TestLifecycleEdges(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	b, err := New(cfg)
	require.NoError(t, err)
	assert.Equal(t, "", b.Addr())
	require.NoError(t, b.Close(context.Background()), "close before start")
	require.NoError(t, b.Close(context.Background()), "twice")
	assert.ErrorIs(t, b.Start(context.Background()), ErrStarted)

	running := startBroker(t, testConfig(t, t.TempDir()))
	cfg2 := testConfig(t, t.TempDir())
	cfg2.Listen = running.Addr() // taken
	b2, err := New(cfg2)
	require.NoError(t, err)
	require.Error(t, b2.Start(context.Background()))
	require.NoError(t, b2.Close(context.Background()), "close after a failed start returns")
}

func TestTinyAutoRenewAheadStarts(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Limits.AutoRenewAhead = time.Nanosecond
	b := startBroker(t, cfg)
	c := dial(t, b.Addr(), "tiny-renew")
	resp, err := c.rpc.QueryRoute(metadataCtx(context.Background(), c.id), &rmqpb.QueryRouteRequest{Topic: res("normal")})
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())
}
