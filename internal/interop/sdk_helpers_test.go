//go:build interop

package interop

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/producer"
)

// sdkCluster is one cluster entry of a logic topic in the SDK tests: the
// real proxy's endpoint and a physical topic created by interop/run.sh.
type sdkCluster struct {
	name     string
	physical string
	weight   int
}

// sdkConfig maps the logic topic onto the given clusters, all served by the
// one real proxy at endpoint (two cluster entries on one proxy differ only
// by their physical topic, which is enough for the producer: it keys
// clusters by name and targets by cluster and endpoint).
func sdkConfig(endpoint, logic string, batching bool, clusters ...sdkCluster) *config.Config {
	cfg := config.Default()
	cfg.Batching.Enabled = batching
	var cs []config.Cluster
	for _, c := range clusters {
		cs = append(cs, config.Cluster{Name: c.name, Endpoints: []string{endpoint}, Topic: c.physical, Weight: c.weight})
	}
	cfg.Topics = map[string]config.Topic{logic: {Clusters: cs}}
	return cfg
}

// sdkProducer starts a producer and closes it when the test ends.
func sdkProducer(t testing.TB, opts ...producer.Option) *producer.Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := producer.New(ctx, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, p.Close(ctx))
	})
	return p
}

// sdkDrain receives topic for group from the proxy at endpoint, acking
// everything, until every id in want was seen or within passed. The proxy
// pops from every queue of a broker whatever queue id is named, so one
// queue per broker is asked. It returns every delivery by message id.
func sdkDrain(t testing.TB, endpoint, group, topic string, want map[string]bool, within time.Duration) map[string][]*driver.ReceivedMessage {
	t.Helper()
	c, err := driver.New(driver.Config{
		Type:          driver.SimpleConsumer,
		Group:         group,
		Subscriptions: []driver.Subscription{{Topic: topic}},
	})
	require.NoError(t, err)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	}()
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	route, err := c.QueryRoute(rctx, endpoint, topic)
	cancel()
	require.NoError(t, err)
	var queues []driver.Queue
	brokers := map[string]bool{}
	for _, q := range route.ReadableQueues() {
		if !brokers[q.Broker] {
			brokers[q.Broker] = true
			queues = append(queues, q)
		}
	}
	require.NotEmpty(t, queues, "no readable queue of %s", topic)

	got := map[string][]*driver.ReceivedMessage{}
	missing := func() int {
		n := 0
		for id := range want {
			if len(got[id]) == 0 {
				n++
			}
		}
		return n
	}
	end := time.Now().Add(within)
	for missing() > 0 && time.Now().Before(end) {
		for _, q := range queues {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			msgs, err := c.Receive(ctx, driver.ReceiveRequest{Queue: q, BatchSize: 32,
				InvisibleDuration: time.Minute, LongPollingTimeout: 5 * time.Second})
			require.NoError(t, err)
			var acks []driver.AckEntry
			for _, m := range msgs {
				got[m.ID] = append(got[m.ID], m)
				acks = append(acks, driver.AckEntry{MessageID: m.ID, ReceiptHandle: m.ReceiptHandle})
			}
			if len(acks) > 0 {
				_, err := c.Ack(ctx, q.Endpoint, topic, acks)
				require.NoError(t, err)
			}
			cancel()
		}
	}
	return got
}

// sdkHistogram returns the sample count and sum of the histogram name
// gathered from reg, and how many samples were at most le.
func sdkHistogram(t testing.TB, reg *prometheus.Registry, name string, le float64) (count uint64, sum float64, atMost uint64) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			count += h.GetSampleCount()
			sum += h.GetSampleSum()
			found := false
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == le {
					atMost += b.GetCumulativeCount()
					found = true
				}
			}
			require.True(t, found, "histogram %s has no bucket with upper bound %v", name, le)
		}
		return count, sum, atMost
	}
	t.Fatalf("metric %s not registered", name)
	return 0, 0, 0
}

// sdkBody is a 1 KB body that names its message, so a body received back
// proves it belongs to the message id it came with.
func sdkBody(tag string, i int) []byte {
	b := make([]byte, 1024)
	for j := range b {
		b[j] = byte('a' + j%26)
	}
	copy(b, fmt.Sprintf("%s-%06d|", tag, i))
	return b
}
