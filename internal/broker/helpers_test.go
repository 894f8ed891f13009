package broker

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// testConfig is a one-broker config with fast test limits.
func testConfig(t testing.TB, dir string) Config {
	t.Helper()
	return Config{
		Cluster: "c1",
		Name:    "b0",
		DataDir: dir,
		Topics: []Topic{
			{Name: "normal", Queues: 4},
			{Name: "fifo", Queues: 2, Type: TypeFIFO},
			{Name: "delay", Queues: 2, Type: TypeDelay},
			{Name: "mixed", Queues: 2, Type: TypeMixed},
			{Name: "tx", Queues: 1, Type: TypeTransaction},
		},
		Groups: []Group{
			{Name: "g1"},
			{Name: "g3", MaxDeliveryAttempts: 3},
			{Name: "gfifo", FIFO: true, MaxDeliveryAttempts: 5},
		},
		Limits: Limits{
			MinInvisible:   50 * time.Millisecond,
			MinLongPolling: 50 * time.Millisecond,
		},
		CheckpointInterval: 50 * time.Millisecond,
	}
}

func startBroker(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.Close(ctx))
	})
	return b
}

// tclient is a raw protocol client for the tests.
type tclient struct {
	t       *testing.T
	id      string
	version string // x-mq-client-version, if set
	conn    *grpc.ClientConn
	rpc     rmqpb.MessagingServiceClient
}

func dial(t *testing.T, addr, clientID string) *tclient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &tclient{t: t, id: clientID, conn: conn, rpc: rmqpb.NewMessagingServiceClient(conn)}
}

func (c *tclient) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	if c.id != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", c.id, "x-mq-language", "GO", "x-mq-protocol", "v2")
	}
	if c.version != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-mq-client-version", c.version)
	}
	return ctx, cancel
}

func res(name string) *rmqpb.Resource { return &rmqpb.Resource{Name: name} }

// msg builds a valid message for topic.
func msg(topic, id, body string) *rmqpb.Message {
	return &rmqpb.Message{
		Topic: res(topic),
		SystemProperties: &rmqpb.SystemProperties{
			MessageId:    id,
			BodyEncoding: rmqpb.Encoding_IDENTITY,
			MessageType:  rmqpb.MessageType_NORMAL,
		},
		Body: []byte(body),
	}
}

func (c *tclient) send(msgs ...*rmqpb.Message) *rmqpb.SendMessageResponse {
	c.t.Helper()
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.SendMessage(ctx, &rmqpb.SendMessageRequest{Messages: msgs})
	require.NoError(c.t, err)
	return resp
}

// sendN sends n normal messages one by one and returns their ids.
func (c *tclient) sendN(topic string, n int) []string {
	c.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%d-%d", topic, time.Now().UnixNano(), i)
		resp := c.send(msg(topic, id, "body "+id))
		require.Equal(c.t, rmqpb.Code_OK, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
		ids = append(ids, id)
	}
	return ids
}

type received struct {
	status   *rmqpb.Status
	messages []*rmqpb.Message
	tail     bool // ended with a delivery_timestamp
	order    []string
}

type recvOpt func(*rmqpb.ReceiveMessageRequest)

func withFilter(expr string) recvOpt {
	return func(r *rmqpb.ReceiveMessageRequest) {
		r.FilterExpression = &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: expr}
	}
}

func (c *tclient) receive(group, topic string, batch int32, invisible, poll time.Duration, opts ...recvOpt) received {
	c.t.Helper()
	req := &rmqpb.ReceiveMessageRequest{
		Group:              res(group),
		MessageQueue:       &rmqpb.MessageQueue{Topic: res(topic), Id: -1},
		FilterExpression:   &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"},
		BatchSize:          batch,
		InvisibleDuration:  durationpb.New(invisible),
		LongPollingTimeout: durationpb.New(poll),
	}
	for _, o := range opts {
		o(req)
	}
	return c.receiveReq(req, poll+5*time.Second)
}

func (c *tclient) receiveReq(req *rmqpb.ReceiveMessageRequest, deadline time.Duration) received {
	c.t.Helper()
	ctx, cancel := c.ctx(deadline)
	defer cancel()
	stream, err := c.rpc.ReceiveMessage(ctx, req)
	require.NoError(c.t, err)
	var out received
	for {
		r, err := stream.Recv()
		if err != nil {
			require.ErrorContains(c.t, err, "EOF")
			break
		}
		switch v := r.GetContent().(type) {
		case *rmqpb.ReceiveMessageResponse_Status:
			out.status = v.Status
			out.order = append(out.order, "status")
		case *rmqpb.ReceiveMessageResponse_Message:
			out.messages = append(out.messages, v.Message)
			out.order = append(out.order, "message")
		case *rmqpb.ReceiveMessageResponse_DeliveryTimestamp:
			out.tail = true
			out.order = append(out.order, "delivery_timestamp")
		}
	}
	return out
}

func (c *tclient) ack(group, topic string, ms ...*rmqpb.Message) *rmqpb.AckMessageResponse {
	c.t.Helper()
	req := &rmqpb.AckMessageRequest{Group: res(group), Topic: res(topic)}
	for _, m := range ms {
		req.Entries = append(req.Entries, &rmqpb.AckMessageEntry{
			MessageId: m.GetSystemProperties().GetMessageId(), ReceiptHandle: m.GetSystemProperties().GetReceiptHandle(),
		})
	}
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.AckMessage(ctx, req)
	require.NoError(c.t, err)
	return resp
}

func (c *tclient) ackHandle(group, topic, handle string) *rmqpb.AckMessageResponse {
	c.t.Helper()
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.AckMessage(ctx, &rmqpb.AckMessageRequest{Group: res(group), Topic: res(topic),
		Entries: []*rmqpb.AckMessageEntry{{MessageId: "x", ReceiptHandle: handle}}})
	require.NoError(c.t, err)
	return resp
}

func (c *tclient) change(group, topic, handle string, d time.Duration) *rmqpb.ChangeInvisibleDurationResponse {
	c.t.Helper()
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.ChangeInvisibleDuration(ctx, &rmqpb.ChangeInvisibleDurationRequest{
		Group: res(group), Topic: res(topic), ReceiptHandle: handle, InvisibleDuration: durationpb.New(d), MessageId: "x",
	})
	require.NoError(c.t, err)
	return resp
}

// drain receives from (group, topic) until want messages came or the
// deadline passed, acking each.
func (c *tclient) drain(group, topic string, want int, within time.Duration) []*rmqpb.Message {
	c.t.Helper()
	var got []*rmqpb.Message
	end := time.Now().Add(within)
	for len(got) < want && time.Now().Before(end) {
		r := c.receive(group, topic, 32, 10*time.Second, 300*time.Millisecond)
		if len(r.messages) == 0 {
			continue
		}
		ack := c.ack(group, topic, r.messages...)
		require.Equal(c.t, rmqpb.Code_OK, ack.GetStatus().GetCode(), ack.GetStatus().GetMessage())
		got = append(got, r.messages...)
	}
	return got
}

func ids(ms []*rmqpb.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.GetSystemProperties().GetMessageId()
	}
	return out
}

var _ = proto.String

func metadataCtx(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", id)
}

func contextWithDeadline(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func benchDial(b *testing.B, addr string) rmqpb.MessagingServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	b.Cleanup(func() { _ = conn.Close() })
	return rmqpb.NewMessagingServiceClient(conn)
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
