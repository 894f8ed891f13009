package producer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
)

// startEnv starts two embedded clusters of two brokers each, with the
// given physical topics on every broker, and stops them when the test ends.
func startEnv(t testing.TB, topics ...string) *embedded.Env {
	t.Helper()
	return startEnvWith(t, embedded.Options{}, topics...)
}

// startEnvWith is startEnv with opts (its Dir and MinLongPolling are set
// here).
func startEnvWith(t testing.TB, opts embedded.Options, topics ...string) *embedded.Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts.Dir, opts.MinLongPolling = t.TempDir(), 50*time.Millisecond
	for _, name := range topics {
		opts.Topics = append(opts.Topics, embedded.Topic{Name: name, Queues: 4, Type: embedded.Mixed})
	}
	env, err := embedded.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.Close(ctx)
	})
	return env
}

// docFor maps the logic topic onto the physical topic of the same name on
// every cluster of env, with the given weights (100 each by default), all
// in priority 0.
func docFor(env *embedded.Env, topic string, weights ...int) *config.Config {
	cfg := config.Default()
	t := env.TopicConfig(topic)
	for i := range t.Clusters {
		t.Clusters[i].Priority = 0
		if i < len(weights) {
			t.Clusters[i].Weight = weights[i]
		}
	}
	cfg.Topics = map[string]config.Topic{topic: t}
	return cfg
}

// noRouteConfig maps the logic topic "nowhere" to a cluster whose only
// endpoint refuses connections, with short requests: its sends never find
// a route.
func noRouteConfig() *config.Config {
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"nowhere": {Clusters: []config.Cluster{
		{Name: "dead", Endpoints: []string{"127.0.0.1:1"}, Topic: "nowhere", Weight: 100},
	}}}
	cfg.Timeouts.Request = config.Duration(200 * time.Millisecond)
	return cfg
}

func newProducer(t testing.TB, opts ...Option) *Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := New(ctx, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// drain receives every message of topic stored on the brokers of env, as a
// consumer would, and returns them by message id. It is how the tests count
// what the brokers really stored.
func drain(t testing.TB, env *embedded.Env, topic string) map[string]*driver.ReceivedMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := driver.New(driver.Config{
		Type:          driver.SimpleConsumer,
		Group:         "drain_" + topic,
		Subscriptions: []driver.Subscription{{Topic: topic}},
	})
	require.NoError(t, err)
	defer func() { _ = c.Close(ctx) }()
	out := map[string]*driver.ReceivedMessage{}
	for _, cl := range env.Clusters() {
		for _, b := range cl.Brokers() {
			if !b.Running() {
				continue
			}
			route, err := c.QueryRoute(ctx, b.Endpoint(), topic)
			require.NoError(t, err)
			for _, q := range route.ReadableQueues() {
				if q.Endpoint != b.Endpoint() {
					continue
				}
				for {
					msgs, err := c.Receive(ctx, driver.ReceiveRequest{
						Queue: q, BatchSize: 32, InvisibleDuration: time.Minute,
						LongPollingTimeout: 50 * time.Millisecond,
					})
					require.NoError(t, err)
					if len(msgs) == 0 {
						break
					}
					for _, m := range msgs {
						out[m.ID] = m
					}
				}
			}
		}
	}
	return out
}
