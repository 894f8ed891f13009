package etcd_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	etcd "github.com/twinmq/twinmq/contrib/etcd"
	"github.com/twinmq/twinmq/contrib/etcd/internal/etcdtest"
)

const key = "/twinmq/config/orders-service"

// document is a valid configuration whose dc1 weight is w.
func document(t *testing.T, w int) string {
	t.Helper()
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"orders": {Clusters: []config.Cluster{
		{Name: "dc1", Endpoints: []string{"127.0.0.1:18081"}, Topic: "orders", Weight: w},
		{Name: "dc2", Endpoints: []string{"127.0.0.1:18082"}, Topic: "orders", Weight: 100, Priority: 1},
	}}}
	data, err := cfg.Marshal()
	require.NoError(t, err)
	return string(data)
}

func weight(c *config.Config) int { return c.Topics["orders"].Clusters[0].Weight }

func startWatcher(t *testing.T, src config.Source) *config.Watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := config.Start(ctx, src, config.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func newSource(t *testing.T, endpoint string, opts etcd.Options) *etcd.Source {
	t.Helper()
	cli := etcdtest.Client(t, endpoint)
	s, err := etcd.NewSource(context.Background(), cli, key, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSourceFollowsTheKey(t *testing.T) {
	checkNoLeaks(t)
	srv := etcdtest.Start(t)
	raw := etcdtest.Client(t, srv.Endpoint())
	ctx := context.Background()
	put, err := raw.Put(ctx, key, document(t, 100))
	require.NoError(t, err)

	w := startWatcher(t, newSource(t, srv.Endpoint(), etcd.Options{}))
	assert.Equal(t, 100, weight(w.Current()))
	assert.Equal(t, strconv.FormatInt(put.Header.Revision, 10), w.Revision(), "the revision is the key's mod revision")

	put, err = raw.Put(ctx, key, document(t, 10))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return weight(w.Current()) == 10 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, strconv.FormatInt(put.Header.Revision, 10), w.Revision())

	// A bad document is rejected; the last good one keeps serving.
	_, err = raw.Put(ctx, key, `{"topics": {"orders": {"clusters": []}}, "unknown": 1}`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.LastError() != nil }, 10*time.Second, 10*time.Millisecond)
	assert.ErrorIs(t, w.LastError(), config.ErrInvalidConfig)
	assert.Equal(t, 10, weight(w.Current()))

	// A deleted key is rejected too.
	_, err = raw.Delete(ctx, key)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.LastError() != nil && errors.Is(w.LastError(), etcd.ErrNoDocument) },
		10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 10, weight(w.Current()))

	// Put back, it serves again.
	_, err = raw.Put(ctx, key, document(t, 55))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return weight(w.Current()) == 55 && w.LastError() == nil }, 10*time.Second, 10*time.Millisecond)
}

func TestSourceMissingKeyFailsStart(t *testing.T) {
	checkNoLeaks(t)
	srv := etcdtest.Start(t)
	src := newSource(t, srv.Endpoint(), etcd.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := config.Start(ctx, src, config.Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, etcd.ErrNoDocument)
	assert.Contains(t, err.Error(), key)
}

func TestSourceOutageKeepsLastGoodThenCatchesUp(t *testing.T) {
	checkNoLeaks(t)
	srv := etcdtest.Start(t)
	raw := etcdtest.Client(t, srv.Endpoint())
	ctx := context.Background()
	_, err := raw.Put(ctx, key, document(t, 100))
	require.NoError(t, err)
	p := etcdtest.NewProxy(t, srv.Endpoint())
	reg := prometheus.NewRegistry()
	w := startWatcher(t, newSource(t, p.Addr(), etcd.Options{Registerer: reg}))

	p.Cut()
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(counter(t, reg, "twinmq_etcd_config_connected")) == 0
	}, 15*time.Second, 20*time.Millisecond)
	_, err = raw.Put(ctx, key, document(t, 30))
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, 100, weight(w.Current()), "the last good document serves during the outage")
	assert.NoError(t, w.LastError())
	p.Heal()
	require.Eventually(t, func() bool { return weight(w.Current()) == 30 }, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1.0, testutil.ToFloat64(counter(t, reg, "twinmq_etcd_config_outages_total")))
}

// After etcd is rebuilt empty and the document published again, the new
// document applies even if its mod revision equals the old one's.
func TestSourceAfterEtcdRestartedEmpty(t *testing.T) {
	checkNoLeaks(t)
	srv := etcdtest.Start(t)
	raw := etcdtest.Client(t, srv.Endpoint())
	ctx := context.Background()
	var rev int64
	for i := range 3 { // the document's mod revision is 4 (the store starts at 1)
		put, err := raw.Put(ctx, key, document(t, 100+i))
		require.NoError(t, err)
		rev = put.Header.Revision
	}
	w := startWatcher(t, newSource(t, srv.Endpoint(), etcd.Options{}))
	assert.Equal(t, strconv.FormatInt(rev, 10), w.Revision())

	require.NoError(t, srv.RestartEmpty())
	require.Eventually(t, func() bool { return errors.Is(w.LastError(), etcd.ErrNoDocument) }, 20*time.Second, 20*time.Millisecond,
		"the lost key is noticed, and the last good document keeps serving")
	assert.Equal(t, 102, weight(w.Current()))
	var put2 int64
	for i := range 3 { // the same mod revision as before, another document
		put, err := raw.Put(ctx, key, document(t, 7+i))
		require.NoError(t, err)
		put2 = put.Header.Revision
	}
	require.Equal(t, rev, put2, "the test needs equal mod revisions")
	require.Eventually(t, func() bool { return weight(w.Current()) == 9 }, 20*time.Second, 10*time.Millisecond)
	assert.NotEqual(t, strconv.FormatInt(rev, 10), w.Revision())
}
