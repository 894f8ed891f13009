package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// withRemoting adds to cfg's topic a cluster that speaks the remoting
// protocol (its endpoint a name server that is never dialled).
func withRemoting(cfg *config.Config, topic string) *config.Config {
	cfg = cfg.Clone()
	tc := cfg.Topics[topic]
	tc.Clusters = append(tc.Clusters, config.Cluster{Name: "classic", Endpoints: []string{"127.0.0.1:1"}, Topic: topic,
		Weight: 100, Protocol: config.ProtocolRemoting})
	cfg.Topics[topic] = tc
	return cfg
}

// The consumer does not consume remoting clusters yet: New refuses a topic
// that has one, naming where it is in the document, rather than consuming
// only the topic's other clusters and leaving that one's messages behind.
func TestNewRefusesARemotingCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noop := func(context.Context, *Message) error { return nil }
	_, err := New(ctx, "billing", "orders", noop, WithConfig(withRemoting(deadConfig("orders"), "orders")))
	require.ErrorIs(t, err, ErrUnsupported)
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "topics.orders.clusters[1]")
	require.ErrorContains(t, err, `"classic"`)
}

// A reload that adds a remoting cluster to the consumed topic is refused;
// the previous configuration keeps serving, and State says why.
func TestReloadRefusesARemotingCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := make(chan config.Version, 2)
	first := deadConfig("orders")
	in <- config.Version{Config: first, Revision: "r1"}
	noop := func(context.Context, *Message) error { return nil }
	c, err := New(ctx, "billing", "orders", noop, WithSource(config.Chan(in)))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close(ctx)) }()

	in <- config.Version{Config: withRemoting(first, "orders"), Revision: "r2"}
	require.Eventually(t, func() bool {
		r := c.State().Config.Rejected
		return r != nil && r.Revision == "r2"
	}, 5*time.Second, 10*time.Millisecond)
	st := c.State()
	require.Equal(t, "r1", st.Config.Revision)
	require.ErrorIs(t, st.Config.Rejected.Err, ErrUnsupported)
	close(in)
}
