package producer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
)

// A healthy producer's State shows every cluster routed and every broker
// connected, sending, at its full failover weight, under the revision it
// applied.
func TestStateOfAHealthyProducer(t *testing.T) {
	env := startEnv(t, "orders")
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: docFor(env, "orders"), Revision: "r1"}
	p := newProducer(t, WithSource(config.Chan(versions)))
	ctx := testCtx(t)
	for i := range 20 {
		_, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte{byte(i)}})
		require.NoError(t, err)
	}
	st := p.State()
	assert.Equal(t, "r1", st.Config.Revision)
	assert.Nil(t, st.Config.Rejected)
	require.Len(t, st.Topics, 1)
	assert.Equal(t, "orders", st.Topics[0].Name)
	require.Len(t, st.Topics[0].Clusters, 2)
	for i, cs := range st.Topics[0].Clusters {
		assert.Equal(t, env.Clusters()[i].Name, cs.Name)
		assert.Equal(t, "orders", cs.PhysicalTopic)
		assert.Equal(t, config.DefaultWeight, cs.Weight)
		assert.True(t, cs.Routed)
		assert.Nil(t, cs.Refused)
		require.Len(t, cs.Brokers, 2)
		for _, b := range cs.Brokers {
			assert.Contains(t, env.Clusters()[i].Endpoints(), b.Endpoint)
			assert.True(t, b.Sending)
			assert.Nil(t, b.Refused)
			assert.False(t, b.Down)
			assert.Positive(t, b.MaxWeight)
			assert.Equal(t, b.MaxWeight, b.Weight)
		}
	}

	bad := docFor(env, "orders")
	bad.Timeouts.Request = 0
	versions <- config.Version{Config: bad, Revision: "r2"}
	require.Eventually(t, func() bool { return p.State().Config.Rejected != nil }, 10*time.Second, time.Millisecond)
	st = p.State()
	assert.Equal(t, "r1", st.Config.Revision)
	assert.Equal(t, "r2", st.Config.Rejected.Revision)
	assert.ErrorIs(t, st.Config.Rejected.Err, config.ErrInvalidConfig)
}

// A topic missing on a cluster shows as that cluster's refusal, with
// RocketMQ's code, while the other cluster takes the traffic.
func TestStateShowsARefusedRoute(t *testing.T) {
	ctx := testCtx(t)
	envA := startEnv(t, "orders")
	envB := startEnv(t) // no topic at all
	cfg := docFor(envA, "orders")
	tc := cfg.Topics["orders"]
	b := envB.TopicConfig("orders")
	b.Clusters[0].Name = "elsewhere"
	tc.Clusters = append(tc.Clusters[:1], b.Clusters[0])
	cfg.Topics["orders"] = tc
	p := newProducer(t, WithConfig(cfg))
	_, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("x")})
	require.NoError(t, err)

	st := p.State()
	require.Len(t, st.Topics[0].Clusters, 2)
	good, refused := st.Topics[0].Clusters[0], st.Topics[0].Clusters[1]
	assert.True(t, good.Routed)
	assert.Nil(t, good.Refused)
	assert.False(t, refused.Routed)
	require.NotNil(t, refused.Refused)
	assert.Equal(t, "TOPIC_NOT_FOUND", refused.Refused.CodeName)
	assert.Equal(t, "QueryRoute", refused.Refused.RPC)
	assert.Error(t, refused.LastError)
	assert.Empty(t, refused.Brokers)
}

// A broker that refuses the producer's messages (a message type its topic
// does not take) shows the refusal on that broker.
func TestStateShowsARefusedSend(t *testing.T) {
	ctx := testCtx(t)
	env, err := embedded.Start(ctx, embedded.Options{Dir: t.TempDir(), Clusters: 1, BrokersPerCluster: 1,
		Topics: []embedded.Topic{{Name: "plain", Queues: 2, Type: embedded.Normal}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Close(context.Background()) })
	p := newProducer(t, WithConfig(docFor(env, "plain")))
	_, err = p.Send(ctx, &Message{Topic: "plain", Body: []byte("x"), MessageGroup: "g"})
	require.Error(t, err)

	b := p.State().Topics[0].Clusters[0].Brokers[0]
	assert.False(t, b.Sending)
	require.NotNil(t, b.Refused)
	assert.Equal(t, "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE", b.Refused.CodeName)
	assert.Equal(t, "SendMessage", b.Refused.RPC)

	_, err = p.Send(ctx, &Message{Topic: "plain", Body: []byte("y")})
	require.NoError(t, err)
	b = p.State().Topics[0].Clusters[0].Brokers[0]
	assert.True(t, b.Sending)
	assert.Nil(t, b.Refused, "a later success ends the refusal")
	assert.Error(t, b.LastError, "the last error stays on record")
}
