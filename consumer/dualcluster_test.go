package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// TestDualCluster: one group consumes what is produced to either cluster;
// with one cluster stopped, what is produced to the other is still
// consumed; after the stopped cluster comes back, its new messages are
// consumed and nothing acked before the restart is delivered again.
func TestDualCluster(t *testing.T) {
	const topic, group = "dual_orders", "dual_group"
	env := startEnv(t, topic)
	cfg := docFor(env, topic, group, config.Consumer{})
	s := newSender(t, env, topic)
	rec := newRecord()
	c1 := newConsumer(t, group, topic, rec.handler("c1"), WithConfig(cfg), WithInstanceName("dual-1"))
	c2 := newConsumer(t, group, topic, rec.handler("c2"), WithConfig(cfg), WithInstanceName("dual-2"))

	// Both clusters.
	first := append(s.send(0, 50, ""), s.send(1, 50, "")...)
	rec.waitHandled(t, first)
	waitIdle(t, c1, c2)
	byCluster := map[string]int{}
	rec.mu.Lock()
	for _, n := range rec.ok {
		byCluster[n[0]]++
	}
	rec.mu.Unlock()
	t.Logf("first 100 messages handled by consumer: %v", byCluster)

	// Cluster a down: cluster b keeps being consumed.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	down := env.Clusters()[0]
	for _, b := range down.Brokers() {
		require.NoError(t, b.Stop(ctx))
	}
	during := s.send(1, 50, "")
	rec.waitHandled(t, during)
	waitIdle(t, c1, c2)

	// Cluster a back: its stored progress survived, new messages flow.
	for _, b := range down.Brokers() {
		require.NoError(t, b.Restart(ctx))
	}
	after := append(s.send(0, 50, ""), s.send(1, 20, "")...)
	rec.waitHandled(t, after)
	waitIdle(t, c1, c2)
	// Leave time for anything wrongly un-acked to come back (twice the
	// invisible time).
	time.Sleep(2*testInvisible + 500*time.Millisecond)

	dups := rec.duplicates()
	t.Logf("messages: %d; duplicate handler runs: %d", len(first)+len(during)+len(after), dups)
	assert.Zero(t, dups, "messages acked before the restart were delivered again")
}
