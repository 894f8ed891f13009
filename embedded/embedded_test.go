package embedded

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

func startEnv(t *testing.T, opts Options) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, env.Close(ctx))
	})
	return env
}

type client struct {
	t   *testing.T
	rpc rmqpb.MessagingServiceClient
}

func connect(t *testing.T, endpoint string) *client {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &client{t: t, rpc: rmqpb.NewMessagingServiceClient(conn)}
}

func (c *client) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	return metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", "embedded-test"), cancel
}

func (c *client) route(topic string, d time.Duration) (*rmqpb.QueryRouteResponse, error) {
	ctx, cancel := c.ctx(d)
	defer cancel()
	return c.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: topic}})
}

func (c *client) send(topic, id string) *rmqpb.SendMessageResponse {
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.SendMessage(ctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{{
		Topic:            &rmqpb.Resource{Name: topic},
		SystemProperties: &rmqpb.SystemProperties{MessageId: id, QueueId: -1},
		Body:             []byte("payload " + id),
	}}})
	require.NoError(c.t, err)
	return resp
}

func (c *client) receiveIDs(group, topic string, within time.Duration) []string {
	var out []string
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		ctx, cancel := c.ctx(5 * time.Second)
		stream, err := c.rpc.ReceiveMessage(ctx, &rmqpb.ReceiveMessageRequest{
			Group: &rmqpb.Resource{Name: group}, MessageQueue: &rmqpb.MessageQueue{Topic: &rmqpb.Resource{Name: topic}},
			FilterExpression: &rmqpb.FilterExpression{Expression: "*"}, BatchSize: 32,
			InvisibleDuration: durationpb.New(10 * time.Second), LongPollingTimeout: durationpb.New(200 * time.Millisecond),
		})
		require.NoError(c.t, err)
		var entries []*rmqpb.AckMessageEntry
		for {
			r, err := stream.Recv()
			if err != nil {
				break
			}
			if m := r.GetMessage(); m != nil {
				out = append(out, m.GetSystemProperties().GetMessageId())
				entries = append(entries, &rmqpb.AckMessageEntry{MessageId: m.GetSystemProperties().GetMessageId(), ReceiptHandle: m.GetSystemProperties().GetReceiptHandle()})
			}
		}
		cancel()
		if len(entries) > 0 {
			ctx, cancel := c.ctx(5 * time.Second)
			ack, err := c.rpc.AckMessage(ctx, &rmqpb.AckMessageRequest{Group: &rmqpb.Resource{Name: group}, Topic: &rmqpb.Resource{Name: topic}, Entries: entries})
			cancel()
			require.NoError(c.t, err)
			require.Equal(c.t, rmqpb.Code_OK, ack.GetStatus().GetCode())
		}
	}
	return out
}

func TestTwoClustersUp(t *testing.T) {
	env := startEnv(t, Options{
		Topics:               []Topic{{Name: "orders", Queues: 2}},
		Groups:               []Group{{Name: "billing"}},
		MinInvisibleDuration: 100 * time.Millisecond,
		MinLongPolling:       100 * time.Millisecond,
	})
	require.Len(t, env.Clusters(), 2)
	seen := map[string]bool{}
	for _, cl := range env.Clusters() {
		require.Len(t, cl.Brokers(), 2)
		eps := cl.Endpoints()
		require.Len(t, eps, 2)
		for _, ep := range eps {
			assert.False(t, seen[ep], "endpoints are distinct")
			seen[ep] = true
			assert.Regexp(t, `^127\.0\.0\.1:\d+$`, ep)
		}
		// Each broker's route lists both brokers of its cluster only.
		resp, err := connect(t, eps[0]).route("orders", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())
		names := map[string]bool{}
		for _, mq := range resp.GetMessageQueues() {
			names[mq.GetBroker().GetName()] = true
		}
		assert.Equal(t, map[string]bool{cl.Name + "-broker-0": true, cl.Name + "-broker-1": true}, names)
	}
	// TopicConfig describes the clusters for a configuration document.
	doc := config.Default()
	doc.Topics = map[string]config.Topic{"logic": env.TopicConfig("orders")}
	require.NoError(t, doc.Validate())
	for i, c := range doc.Topics["logic"].Clusters {
		assert.Equal(t, config.Cluster{Name: env.Clusters()[i].Name, Endpoints: env.Clusters()[i].Endpoints(),
			Topic: "orders", Weight: config.DefaultWeight, Priority: i}, c)
	}
	// Messages stay in the broker they were sent to.
	a := connect(t, env.Clusters()[0].Endpoints()[0])
	b := connect(t, env.Clusters()[1].Endpoints()[1])
	require.Equal(t, rmqpb.Code_OK, a.send("orders", "m-a").GetStatus().GetCode())
	require.Equal(t, rmqpb.Code_OK, b.send("orders", "m-b").GetStatus().GetCode())
	assert.Equal(t, []string{"m-a"}, a.receiveIDs("billing", "orders", time.Second))
	assert.Equal(t, []string{"m-b"}, b.receiveIDs("billing", "orders", time.Second))
	dir := env.Dir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, env.Close(ctx))
	_, err := os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "the temporary dir is removed")
}

func TestFaultInjection(t *testing.T) {
	env := startEnv(t, Options{Clusters: 1, BrokersPerCluster: 1, Topics: []Topic{{Name: "t"}}})
	br := env.Clusters()[0].Brokers()[0]
	c := connect(t, br.Endpoint())

	br.FailNext(1)
	_, err := c.route("t", 5*time.Second)
	assert.Equal(t, codes.Unavailable, grpcstatus.Code(err))
	br.FailNextInternal(1)
	resp, err := c.route("t", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, resp.GetStatus().GetCode())

	br.Pause()
	_, err = c.route("t", 200*time.Millisecond)
	assert.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(err))
	br.Resume()
	_, err = c.route("t", 5*time.Second)
	require.NoError(t, err)

	br.SetLatency(time.Second)
	_, err = c.route("t", 200*time.Millisecond)
	assert.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(err))
	br.SetLatency(0)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, br.Stop(ctx))
	assert.False(t, br.Running())
	_, err = c.route("t", time.Second)
	assert.Error(t, err, "a stopped broker answers nothing")
	require.NoError(t, br.Stop(ctx), "stopping twice is fine")
}

func TestRestartKeepsEndpointMessagesAndProgress(t *testing.T) {
	env := startEnv(t, Options{Clusters: 1, BrokersPerCluster: 2, Topics: []Topic{{Name: "t", Queues: 2}},
		MinInvisibleDuration: 100 * time.Millisecond, MinLongPolling: 100 * time.Millisecond})
	br := env.Clusters()[0].Brokers()[0]
	ep := br.Endpoint()
	c := connect(t, ep)
	for _, id := range []string{"a", "b", "c"} {
		require.Equal(t, rmqpb.Code_OK, c.send("t", id).GetStatus().GetCode())
	}
	assert.ElementsMatch(t, []string{"a", "b", "c"}, c.receiveIDs("g", "t", time.Second))
	require.Equal(t, rmqpb.Code_OK, c.send("t", "d").GetStatus().GetCode())

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	br.Pause() // faults outlive the restart
	require.NoError(t, br.Restart(ctx))
	assert.Equal(t, ep, br.Endpoint())
	_, err := c.route("t", 200*time.Millisecond)
	assert.Equal(t, codes.DeadlineExceeded, grpcstatus.Code(err))
	br.Resume()

	// The acked messages do not come back; the unconsumed one does.
	assert.Equal(t, []string{"d"}, c.receiveIDs("g", "t", time.Second))
	// The peer still routes to it.
	resp, err := connect(t, env.Clusters()[0].Endpoints()[1]).route("t", 5*time.Second)
	require.NoError(t, err)
	assert.Len(t, resp.GetMessageQueues(), 4)
}

func TestRestartFailsAtOnceWhenTheBrokerCannotStart(t *testing.T) {
	env := startEnv(t, Options{Clusters: 1, BrokersPerCluster: 1, Topics: []Topic{{Name: "t", Queues: 1}}})
	br := env.Clusters()[0].Brokers()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, br.Stop(ctx))
	// Unreadable consumer progress: no number of retries starts this broker.
	progress := filepath.Join(env.Dir(), br.Cluster(), br.Name(), "progress", "consumer.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(progress), 0o755))
	require.NoError(t, os.WriteFile(progress, []byte("{not json"), 0o644))
	err := br.Restart(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "Restart gave up only when its context ended")
	assert.False(t, br.Running())

	// Once the data is mended the same broker starts again.
	require.NoError(t, os.Remove(progress))
	require.NoError(t, br.Restart(ctx))
	assert.True(t, br.Running())
}

func TestOptionsValidation(t *testing.T) {
	ctx := context.Background()
	for name, o := range map[string]Options{
		"negative clusters": {Clusters: -1},
		"names mismatch":    {Clusters: 3, ClusterNames: []string{"a"}},
		"dup names":         {ClusterNames: []string{"a", "a"}},
		"bad topic type":    {Topics: []Topic{{Name: "t", Type: MessageType(42)}}},
		"bad topic name":    {Topics: []Topic{{Name: "bad name"}}},
		"flush":             {Flush: FlushMode(7)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Start(ctx, o)
			assert.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
}
