package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	etcd "github.com/twinmq/twinmq/contrib/etcd"
	"github.com/twinmq/twinmq/contrib/etcd/internal/etcdtest"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/lane/lanetest"
)

// fixture is one etcd with registries on their own connections, each
// through its own proxy so that one can be cut off alone.
type fixture struct {
	t       *testing.T
	srv     *etcdtest.Server
	mu      sync.Mutex
	proxies map[lane.Registry]*etcdtest.Proxy
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, srv: etcdtest.Start(t), proxies: map[lane.Registry]*etcdtest.Proxy{}}
}

// registry makes a registry on its own client and proxy; reg may be nil.
func (f *fixture) registry(t *testing.T, opts etcd.Options) (*etcd.Registry, *etcdtest.Proxy) {
	t.Helper()
	p := etcdtest.NewProxy(t, f.srv.Endpoint())
	cli := etcdtest.Client(t, p.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := etcd.NewRegistry(ctx, cli, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	f.mu.Lock()
	f.proxies[r] = p
	f.mu.Unlock()
	return r, p
}

func TestRegistryConformance(t *testing.T) {
	f := newFixture(t)
	lanetest.Run(t, lanetest.Harness{
		New: func(t *testing.T) lane.Registry {
			r, _ := f.registry(t, etcd.Options{})
			return r
		},
		Peer: func(t *testing.T, _ lane.Registry) lane.Registry {
			r, _ := f.registry(t, etcd.Options{})
			return r
		},
		TTL:   time.Second,
		Slack: 2 * time.Second,
		Disconnect: func(t *testing.T, reg lane.Registry) func() {
			f.mu.Lock()
			p := f.proxies[reg]
			f.mu.Unlock()
			p.Cut()
			return p.Heal
		},
	})
	checkNoLeaks(t)
}

// ours lists the goroutines running this package's code.
func ours() []string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	var out []string
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(g, "twinmq/contrib/etcd.") && !strings.Contains(g, "_test.") && !strings.Contains(g, "etcdtest.") {
			out = append(out, g)
		}
	}
	return out
}

func checkNoLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		var left []string
		for range 100 {
			if left = ours(); len(left) == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
	})
}

func recv(t *testing.T, ch <-chan lane.Snapshot, ok func(lane.Snapshot) bool) lane.Snapshot {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case s, open := <-ch:
			require.True(t, open, "watch closed")
			if ok(s) {
				return s
			}
		case <-deadline:
			t.Fatal("no matching snapshot")
		}
	}
}

func lanesOf(s lane.Snapshot) string {
	var b []string
	for ln, ins := range s.Instances {
		for _, in := range ins {
			b = append(b, ln+"/"+in.ID)
		}
	}
	slicesSort(b)
	return strings.Join(b, ",")
}

func slicesSort(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func inst(group, ln, id string) lane.Instance {
	return lane.Instance{Group: group, Lane: ln, ID: id, Addr: "127.0.0.1:7" + fmt.Sprint(len(id))}
}

func TestUndecodableKeysAreSkippedAndCounted(t *testing.T) {
	checkNoLeaks(t)
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	r, _ := f.registry(t, etcd.Options{Registerer: reg, Prefix: "/fleet"})
	raw := etcdtest.Client(t, f.srv.Endpoint())
	ctx := context.Background()
	ch, err := r.Watch(ctx, "g")
	require.NoError(t, err)
	recv(t, ch, func(s lane.Snapshot) bool { return len(s.Instances) == 0 })

	l, err := r.Register(ctx, inst("g", "a", "good"), time.Minute)
	require.NoError(t, err)
	defer func() { _ = l.Release(ctx) }()
	for key, val := range map[string]string{
		"/fleet/lanes/g/junk":      "not json",
		"/fleet/lanes/g/bad-lane":  `{"group":"g","id":"bad-lane","lane":"A..B","addr":"h:1"}`,
		"/fleet/lanes/g/elsewhere": `{"group":"g","id":"someone-else","lane":"a","addr":"h:1"}`,
		"/fleet/lanes/g/extra":     `{"group":"g","id":"extra","lane":"a","addr":"h:1","x":1}`,
	} {
		_, err := raw.Put(ctx, key, val)
		require.NoError(t, err)
	}
	// A valid key written after the bad ones still arrives.
	l2, err := r.Register(ctx, inst("g", "", "base"), time.Minute)
	require.NoError(t, err)
	defer func() { _ = l2.Release(ctx) }()
	s := recv(t, ch, func(s lane.Snapshot) bool { return lanesOf(s) == "/base,a/good" })
	assert.Equal(t, "g", s.Group)
	snap, err := r.Snapshot(ctx, "g")
	require.NoError(t, err)
	assert.Equal(t, "/base,a/good", lanesOf(snap), "a read skips them too")
	assert.GreaterOrEqual(t, testutil.ToFloat64(counter(t, reg, "twinmq_etcd_registry_undecodable_total")), 8.0,
		"four bad keys, seen by the watch and by the read")

	// A bad value over a good key removes the instance: what is there now
	// is not an instance.
	_, err = raw.Put(ctx, "/fleet/lanes/g/good", "garbage")
	require.NoError(t, err)
	recv(t, ch, func(s lane.Snapshot) bool { return lanesOf(s) == "/base" })
}

// counter finds a collector's value by name in a registry.
func counter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() {
				if m.Counter != nil {
					v += m.Counter.GetValue()
				}
				if m.Gauge != nil {
					v += m.Gauge.GetValue()
				}
			}
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "v"})
			g.Set(v)
			return g
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func TestNewFailsClearlyWhenEtcdIsAway(t *testing.T) {
	checkNoLeaks(t)
	srv := etcdtest.Start(t)
	endpoint := srv.Endpoint()
	srv.Stop()
	cli := etcdtest.Client(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := etcd.NewRegistry(ctx, cli, etcd.Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, etcd.ErrUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), endpoint, "the error names where it looked")
	assert.Less(t, time.Since(start), 5*time.Second, "New returns when its ctx ends")

	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	_, err = etcd.NewSource(ctx2, cli, "/twinmq/config/svc", etcd.Options{})
	assert.ErrorIs(t, err, etcd.ErrUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = etcd.NewRegistry(context.Background(), cli, etcd.Options{Prefix: "no-slash"})
	assert.ErrorIs(t, err, etcd.ErrInvalidOptions)
	_, err = etcd.NewRegistry(context.Background(), nil, etcd.Options{})
	assert.ErrorIs(t, err, etcd.ErrInvalidOptions)
}

// An outage: the watch keeps its last snapshot (the channel stays open
// and nothing empties it), the outage is logged once and counted, and the
// watch catches up with what changed meanwhile when etcd returns.
func TestOutageKeepsLastSnapshotThenCatchesUp(t *testing.T) {
	checkNoLeaks(t)
	f := newFixture(t)
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	r, p := f.registry(t, etcd.Options{Logger: zap.New(core), Registerer: reg})
	peer, _ := f.registry(t, etcd.Options{})
	ctx := context.Background()
	l, err := peer.Register(ctx, inst("g", "a.x", "x"), time.Minute)
	require.NoError(t, err)
	ch, err := r.Watch(ctx, "g")
	require.NoError(t, err)
	before := recv(t, ch, func(s lane.Snapshot) bool { return lanesOf(s) == "a.x/x" })

	p.Cut()
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(counter(t, reg, "twinmq_etcd_registry_connected")) == 0
	}, 15*time.Second, 20*time.Millisecond, "the outage is seen without any call")
	_, err = r.Snapshot(shortCtx(t), "g")
	assert.Error(t, err, "a read during the outage fails")
	require.NoError(t, l.Release(ctx))
	_, err = peer.Register(ctx, inst("g", "a", "a1"), time.Minute)
	require.NoError(t, err)
	select {
	case s, ok := <-ch:
		t.Fatalf("a snapshot during the outage: %v %v", lanesOf(s), ok)
	case <-time.After(500 * time.Millisecond):
	}
	// Calls that fail during the outage do not log it again.
	for range 3 {
		_, _ = r.Snapshot(shortCtx(t), "g")
	}
	p.Heal()
	after := recv(t, ch, func(s lane.Snapshot) bool { return lanesOf(s) == "a/a1" })
	assert.Greater(t, after.Revision, before.Revision)
	assert.Equal(t, 1, logs.FilterMessageSnippet("etcd unreachable").Len(), "logged once per outage")
	assert.Equal(t, 1, logs.FilterMessageSnippet("reachable again").Len())
	assert.Equal(t, 1.0, testutil.ToFloat64(counter(t, reg, "twinmq_etcd_registry_outages_total")))
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(counter(t, reg, "twinmq_etcd_registry_connected")) == 1
	}, 15*time.Second, 20*time.Millisecond)
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// etcd restarted empty: every lease is gone, so a renewal fails with
// ErrLeaseExpired and the holder registers again (what the consumer's
// lease loop does); the watch reads the group again and its revisions go
// on growing although the store's started over.
func TestEtcdRestartedEmpty(t *testing.T) {
	checkNoLeaks(t)
	f := newFixture(t)
	r, _ := f.registry(t, etcd.Options{})
	ctx := context.Background()
	// Raise the store's revision well above where the new one starts.
	for i := range 20 {
		l, err := r.Register(ctx, inst("other", "", fmt.Sprint("o", i)), time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	l, err := r.Register(ctx, inst("g", "a", "1"), time.Minute)
	require.NoError(t, err)
	ch, err := r.Watch(ctx, "g")
	require.NoError(t, err)
	before := recv(t, ch, func(s lane.Snapshot) bool { return lanesOf(s) == "a/1" })

	require.NoError(t, f.srv.RestartEmpty())
	emptied := recv(t, ch, func(s lane.Snapshot) bool { return len(s.Instances) == 0 })
	assert.Greater(t, emptied.Revision, before.Revision, "revisions never go back")
	var rerr error
	require.Eventually(t, func() bool {
		rerr = l.Renew(shortCtx(t))
		return errors.Is(rerr, lane.ErrLeaseExpired)
	}, 15*time.Second, 50*time.Millisecond, "renew after the store was rebuilt: %v", rerr)
	_, err = r.Register(ctx, inst("g", "a", "1"), time.Minute)
	require.NoError(t, err)
	back := recv(t, ch, func(s lane.Snapshot) bool { return lanesOf(s) == "a/1" })
	assert.Greater(t, back.Revision, emptied.Revision)
}

// A watch whose revisions were compacted away while it was cut off reads
// the group again and goes on.
func TestWatchAfterCompaction(t *testing.T) {
	checkNoLeaks(t)
	f := newFixture(t)
	r, p := f.registry(t, etcd.Options{})
	raw := etcdtest.Client(t, f.srv.Endpoint())
	peer, _ := f.registry(t, etcd.Options{})
	ctx := context.Background()
	ch, err := r.Watch(ctx, "g")
	require.NoError(t, err)
	recv(t, ch, func(s lane.Snapshot) bool { return len(s.Instances) == 0 })
	p.Cut()
	var last *clientv3.PutResponse
	for i := range 5 {
		l, err := peer.Register(ctx, inst("g", "b", fmt.Sprint("n", i)), time.Minute)
		require.NoError(t, err)
		if i < 4 {
			require.NoError(t, l.Release(ctx))
		}
	}
	last, err = raw.Put(ctx, "/unrelated", "x")
	require.NoError(t, err)
	_, err = raw.Compact(ctx, last.Header.Revision)
	require.NoError(t, err)
	p.Heal()
	recv(t, ch, func(s lane.Snapshot) bool { return lanesOf(s) == "b/n4" })
}
