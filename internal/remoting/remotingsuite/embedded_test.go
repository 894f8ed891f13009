package remotingsuite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/leakcheck"
	"github.com/twinmq/twinmq/internal/remoting/remotingsuite"
	"github.com/twinmq/twinmq/internal/remoting/wire"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// TestRemotingSuiteEmbedded runs the remoting suite against one cluster of
// two embedded brokers through the in-process name server, once with each
// header serialization.
func TestRemotingSuiteEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 2,
		MinLongPolling: 200 * time.Millisecond,
		Topics: []embedded.Topic{
			{Name: remotingsuite.TopicNormal, Queues: 4},
			{Name: remotingsuite.TopicBatch, Queues: 4},
			{Name: remotingsuite.TopicFIFO, Queues: 2, Type: embedded.FIFO},
			{Name: remotingsuite.TopicTxn, Queues: 2, Type: embedded.Transaction},
			{Name: remotingsuite.TopicDelay, Queues: 2, Type: embedded.Delay},
		},
		Groups:           []embedded.Group{{Name: remotingsuite.GroupRead}},
		TransactionCheck: embedded.TransactionCheck{Timeout: 300 * time.Millisecond, Interval: 200 * time.Millisecond, MaxChecks: 50},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, env.Close(ctx))
	})
	for _, st := range []struct {
		name string
		t    wire.SerializeType
	}{{"json", wire.JSON}, {"rocketmq", wire.RocketMQ}} {
		t.Run(st.name, func(t *testing.T) {
			remotingsuite.Run(t, remotingsuite.Backend{
				Name:            "embedded-" + st.name,
				NameServers:     []string{env.NameServer()},
				GRPCEndpoint:    env.Clusters()[0].Endpoints()[0],
				Serialize:       st.t,
				CheckBackWithin: 30 * time.Second,
				Timer:           true,
			})
		})
	}
}
