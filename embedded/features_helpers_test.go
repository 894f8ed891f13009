package embedded_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/testpki"
)

func featureCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// oneBroker starts one cluster of one broker with the topics of these
// tests and fast test limits; mod adjusts the options.
func oneBroker(t testing.TB, mod func(*embedded.Options)) (*embedded.Env, *embedded.Broker) {
	t.Helper()
	o := embedded.Options{
		Clusters: 1, BrokersPerCluster: 1,
		Topics: []embedded.Topic{
			{Name: "plain", Queues: 2},
			{Name: "later", Queues: 2, Type: embedded.Delay},
			{Name: "orders", Queues: 2, Type: embedded.Transaction},
		},
		Groups:               []embedded.Group{{Name: "g"}},
		MinInvisibleDuration: 100 * time.Millisecond,
		MinLongPolling:       50 * time.Millisecond,
	}
	if mod != nil {
		mod(&o)
	}
	env, err := embedded.Start(featureCtx(t), o)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, env.Close(ctx))
	})
	return env, env.Clusters()[0].Brokers()[0]
}

func newClient(t *testing.T, cfg driver.Config) *driver.Client {
	t.Helper()
	c, err := driver.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func producerFor(t *testing.T, topics []string, mod func(*driver.Config)) *driver.Client {
	cfg := driver.Config{Type: driver.Producer, Topics: topics}
	if mod != nil {
		mod(&cfg)
	}
	return newClient(t, cfg)
}

func consumerFor(t *testing.T, topic string, mod func(*driver.Config)) *driver.Client {
	cfg := driver.Config{Type: driver.SimpleConsumer, Group: "g", Subscriptions: []driver.Subscription{{Topic: topic}}}
	if mod != nil {
		mod(&cfg)
	}
	return newClient(t, cfg)
}

// drainTopic receives and acks from every readable queue of topic until
// nothing came for quiet, and returns the messages by id, counting
// repeats.
func drainTopic(t *testing.T, c *driver.Client, endpoint, topic string, quiet time.Duration) map[string][]*driver.ReceivedMessage {
	t.Helper()
	ctx := featureCtx(t)
	route, err := c.QueryRoute(ctx, endpoint, topic)
	require.NoError(t, err)
	got := map[string][]*driver.ReceivedMessage{}
	last := time.Now()
	for time.Since(last) < quiet {
		for _, q := range route.ReadableQueues() {
			msgs, err := c.Receive(ctx, driver.ReceiveRequest{Queue: q, BatchSize: 32, InvisibleDuration: time.Minute,
				LongPollingTimeout: 50 * time.Millisecond})
			require.NoError(t, err)
			for _, m := range msgs {
				got[m.ID] = append(got[m.ID], m)
				errs, err := c.Ack(ctx, m.Endpoint, topic, []driver.AckEntry{{MessageID: m.ID, ReceiptHandle: m.ReceiptHandle}})
				require.NoError(t, err)
				require.NoError(t, errs[0])
				last = time.Now()
			}
		}
	}
	return got
}

// selfSignedTLS returns a server config with a fresh certificate for
// 127.0.0.1 and a client config that trusts it.
func selfSignedTLS(t *testing.T) (server, client *tls.Config) {
	s := testpki.NewServer(t)
	return s.ServerConfig(), s.ClientConfig()
}
