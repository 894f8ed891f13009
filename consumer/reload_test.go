package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// TestClustersFollowConfig: a document that adds a cluster makes the
// consumer receive from it; one that drops a cluster stops receiving from
// it, after the messages received from it were handled and acked (a slow
// handler is running when the cluster is dropped).
func TestClustersFollowConfig(t *testing.T) {
	const topic, group = "reload_orders", "reload_group"
	env := startEnv(t, topic)
	both := docFor(env, topic, group, config.Consumer{})
	only := func(i int) *config.Config {
		cfg := both.Clone()
		tc := cfg.Topics[topic]
		tc.Clusters = tc.Clusters[i : i+1]
		cfg.Topics[topic] = tc
		return cfg
	}
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: only(0), Revision: "only-a"}
	s := newSender(t, env, topic)

	rec := newRecord()
	slow := make(chan struct{})
	inSlow := make(chan struct{}, 1)
	h := rec.handler("c")
	c := newConsumer(t, group, topic, func(ctx context.Context, m *Message) error {
		if string(m.Body) == "body-0-slow" {
			select {
			case inSlow <- struct{}{}:
			default:
			}
			<-slow
		}
		return h(ctx, m)
	}, WithSource(config.Chan(versions)))

	onA := s.send(0, 10, "")
	onB := s.send(1, 10, "")
	rec.waitHandled(t, onA)
	time.Sleep(500 * time.Millisecond)
	for _, id := range onB {
		assert.Empty(t, rec.handlers(id), "cluster b is not in the document yet")
	}

	versions <- config.Version{Config: both, Revision: "both"}
	rec.waitHandled(t, onB)

	// A message in a slow handler on cluster a, then cluster a is dropped.
	slowID := s.send(0, 1, "slow")
	// Wait for the slow message itself to be in its handler: a message of
	// the batches before may still hold an in-flight slot.
	select {
	case <-inSlow:
	case <-time.After(waitLong):
		t.Fatal("the slow message never reached its handler")
	}
	require.Positive(t, c.inflight.inUse())
	versions <- config.Version{Config: only(1), Revision: "only-b"}
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.clusters) == 1 && c.clusters[0].name == env.Clusters()[1].Name
	}, waitLong, 5*time.Millisecond)
	close(slow)
	rec.waitHandled(t, slowID)
	waitIdle(t, c)

	laterA := s.send(0, 5, "")
	laterB := s.send(1, 5, "")
	rec.waitHandled(t, laterB)
	time.Sleep(500 * time.Millisecond)
	for _, id := range laterA {
		assert.Empty(t, rec.handlers(id), "cluster a was dropped")
	}
	// The slow message was acked by the retiring runner: a consumer of the
	// group that follows cluster a again does not see it.
	versions <- config.Version{Config: both, Revision: "both-again"}
	rec.waitHandled(t, laterA)
	waitIdle(t, c)
	time.Sleep(2*testInvisible + 500*time.Millisecond)
	assert.Zero(t, rec.duplicates(), "a message acked during the reload came back")
}
