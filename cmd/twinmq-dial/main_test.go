package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/dial"
)

func TestFlags(t *testing.T) {
	_, err := parseFlags(nil, io.Discard)
	require.ErrorIs(t, err, errUsage)
	f, err := parseFlags([]string{"-config", "x.json", "-kinds", "normal, delay", "-topics", "a,b", "-rate", "5"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "x.json", f.config)
	require.Len(t, f.opts.Kinds, 2)
	require.Equal(t, []string{"a", "b"}, f.opts.Topics)
	require.Equal(t, 5.0, f.opts.Rate)
	require.False(t, f.opts.Shadow)
	f, err = parseFlags([]string{"-config", "x.json", "-shadow"}, io.Discard)
	require.NoError(t, err)
	require.True(t, f.opts.Shadow)
}

// -shadow on a document without shadow topics: a refusal before any
// probe, named so, with the usage exit status.
func TestShadowRefused(t *testing.T) {
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"probe": {Clusters: []config.Cluster{
		{Name: "a", Endpoints: []string{"127.0.0.1:1"}, Topic: "probe", Weight: config.DefaultWeight}}}}
	doc, err := cfg.Marshal()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "twinmq.json")
	require.NoError(t, os.WriteFile(path, doc, 0o600))
	f, err := parseFlags([]string{"-config", path, "-listen", "127.0.0.1:0", "-shadow"}, io.Discard)
	require.NoError(t, err)
	err = run(context.Background(), f, zap.NewNop(), func(string) { t.Error("the dial ran") })
	require.ErrorIs(t, err, dial.ErrShadowUnavailable)
	require.ErrorIs(t, err, errUsage)
}

// The command against embedded brokers: the status page lists the brokers
// and /metrics carries the dial's series.
func TestServes(t *testing.T) {
	ctx := context.Background()
	env, err := embedded.Start(ctx, embedded.Options{
		Topics:         []embedded.Topic{{Name: "probe", Queues: 1, Type: embedded.Mixed}},
		MinLongPolling: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(ctx) }()
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"probe": env.TopicConfig("probe")}
	doc, err := cfg.Marshal()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "twinmq.json")
	require.NoError(t, os.WriteFile(path, doc, 0o600))

	f, err := parseFlags([]string{"-config", path, "-listen", "127.0.0.1:0", "-rate", "20", "-period", "2s"}, io.Discard)
	require.NoError(t, err)
	f.opts.LongPolling = 200 * time.Millisecond
	rctx, cancel := context.WithCancel(ctx)
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(rctx, f, zap.NewNop(), func(a string) { addr <- a }) }()
	base := "http://" + <-addr
	get := func(p string) string {
		resp, err := http.Get(base + p)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(get("/metrics"), "twinmq_dial_received_total{")
	}, 20*time.Second, 50*time.Millisecond)
	page := get("/")
	for _, c := range env.Clusters() {
		for _, b := range c.Brokers() {
			require.Contains(t, page, b.Endpoint())
		}
	}
	m := get("/metrics")
	require.Contains(t, m, "go_goroutines")
	require.Contains(t, m, "twinmq_config_reloads_total")
	cancel()
	require.NoError(t, <-done)
}
