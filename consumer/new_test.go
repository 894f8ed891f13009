package consumer

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// deadConfig maps the logic topic to a cluster whose only endpoint refuses
// connections: New succeeds on it (the cluster is retried in the
// background) without any broker running.
func deadConfig(topic string) *config.Config {
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{topic: {Clusters: []config.Cluster{
		{Name: "dead", Endpoints: []string{"127.0.0.1:1"}, Topic: topic, Weight: 100},
	}}}
	return cfg
}

// A ctx that has already ended fails New every time with ctx's error, and
// never as an invalid configuration. Starting the configuration's watcher
// used to pick at random between its first version (ready at once) and the
// ended ctx: New succeeded about half the time, and otherwise reported the
// cancellation as ErrInvalidConfig.
func TestNewWithAnEndedContextAlwaysFails(t *testing.T) {
	cfg := deadConfig("orders")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	noop := func(context.Context, *Message) error { return nil }
	for i := range 200 {
		c, err := New(ctx, "billing", "orders", noop, WithConfig(cfg))
		if err == nil {
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = c.Close(cctx)
			ccancel()
			t.Fatalf("New succeeded with a cancelled ctx (call %d)", i)
		}
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrInvalidConfig)
	}
}

// A file source whose file does not exist is an invalid configuration, as
// for the producer.
func TestNewWithAMissingConfigFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noop := func(context.Context, *Message) error { return nil }
	path := filepath.Join(t.TempDir(), "twinmq.json")
	_, err := New(ctx, "billing", "orders", noop, WithSource(config.File(path, config.FileOptions{})))
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorIs(t, err, config.ErrInvalidConfig)
	require.ErrorContains(t, err, "no such file")
}
