package wiresuite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/wiresuite"
)

// Floors lowered for the embedded broker, so that redelivery and empty
// receives take a moment instead of the protocol's 10 s and 5 s.
const (
	embeddedMinInvisible   = 2 * time.Second
	embeddedMinLongPolling = 200 * time.Millisecond
)

// startEmbedded brings up one cluster of two brokers with the suite's
// topics and groups. A single cluster is what a proxy access point shows;
// two brokers make routes and receives span endpoints.
func startEmbedded(t testing.TB) *embedded.Env {
	t.Helper()
	opts := embedded.Options{
		Clusters: 1, BrokersPerCluster: 2,
		MinInvisibleDuration: embeddedMinInvisible,
		MinLongPolling:       embeddedMinLongPolling,
		StrictGroups:         true,
	}
	for _, name := range wiresuite.Topics() {
		if isDeadLetterTopic(name) {
			continue // the brokers make them for every declared group
		}
		opts.Topics = append(opts.Topics, embedded.Topic{Name: name, Queues: 4})
	}
	for _, g := range wiresuite.Groups() {
		opts.Groups = append(opts.Groups, embedded.Group{Name: g.Name, MaxDeliveryAttempts: g.MaxDeliveryAttempts})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, env.Close(ctx))
	})
	return env
}

func isDeadLetterTopic(name string) bool {
	for _, g := range wiresuite.Groups() {
		if name == embedded.DLQTopic(g.Name) {
			return true
		}
	}
	return false
}

// TestWireSuiteEmbedded runs the wire suite against the embedded broker.
func TestWireSuiteEmbedded(t *testing.T) {
	env := startEmbedded(t)
	wiresuite.Run(t, wiresuite.Backend{
		Name:           "embedded",
		Endpoint:       env.Clusters()[0].Endpoints()[0],
		MinInvisible:   embeddedMinInvisible,
		MinLongPolling: embeddedMinLongPolling,
		RedeliveryLag:  3 * time.Second,
	})
}
