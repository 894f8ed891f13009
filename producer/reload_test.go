package producer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
)

// writeDoc replaces the file the way editors do: write aside, rename over.
func writeDoc(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

func docBytes(t *testing.T, env *embedded.Env, weights ...int) []byte {
	t.Helper()
	data, err := docFor(env, "feed", weights...).Marshal()
	require.NoError(t, err)
	return data
}

// recentClusters returns the clusters of the last n successful sends.
func recentClusters(log *sendLog, n int) map[string]int {
	log.mu.Lock()
	defer log.mu.Unlock()
	out := map[string]int{}
	for i := len(log.recs) - 1; i >= 0 && n > 0; i-- {
		if r := log.recs[i]; r.err == nil {
			out[r.cluster]++
			n--
		}
	}
	return out
}

// metricValue sums the counter series of name whose labels include labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// Weights changed in the watched file move traffic while senders keep
// sending; a malformed file is rejected and the last good configuration
// keeps serving; nothing sent meanwhile is lost.
func TestHotReloadShiftsTrafficAndSurvivesBadFiles(t *testing.T) {
	env := startEnv(t, "feed")
	a, b := env.Clusters()[0].Name, env.Clusters()[1].Name
	path := filepath.Join(t.TempDir(), "twinmq.json")
	writeDoc(t, path, docBytes(t, env, 100, 0))

	reg := prometheus.NewRegistry()
	src := config.File(path, config.FileOptions{PollInterval: 20 * time.Millisecond})
	p := newProducer(t, WithSource(src), WithRegisterer(reg))

	loadCtx, stopLoad := context.WithCancel(context.Background())
	log := &sendLog{}
	wg := steadyLoad(loadCtx, p, "feed", 4, time.Millisecond, log)
	defer func() { stopLoad(); wg.Wait() }()

	onlyOn := func(cluster string) func() bool {
		return func() bool {
			c := recentClusters(log, 100)
			return c[cluster] == 100
		}
	}
	require.Eventually(t, onlyOn(a), 10*time.Second, 20*time.Millisecond, "weights 100/0 send everything to %s", a)

	writeDoc(t, path, docBytes(t, env, 0, 100))
	require.Eventually(t, onlyOn(b), 10*time.Second, 20*time.Millisecond, "weights 0/100 send everything to %s", b)

	writeDoc(t, path, docBytes(t, env, 50, 50))
	changed := time.Now()
	require.Eventually(t, func() bool {
		c := map[string]int{}
		for _, r := range log.since(changed) {
			c[r.cluster]++
		}
		return c[a] > 20 && c[b] > 20
	}, 10*time.Second, 20*time.Millisecond, "weights 50/50 use both clusters")

	writeDoc(t, path, docBytes(t, env, 0, 100))
	require.Eventually(t, onlyOn(b), 10*time.Second, 20*time.Millisecond)

	// A malformed file and a document that breaks a rule are both refused.
	rejected := func() float64 {
		return metricValue(t, reg, "twinmq_config_reloads_total", map[string]string{"result": config.ResultRejected})
	}
	writeDoc(t, path, []byte(`{"topics": {"feed": {"clusters": [`))
	require.Eventually(t, func() bool { return rejected() >= 1 }, 10*time.Second, 20*time.Millisecond)
	writeDoc(t, path, docBytes(t, env, 0, 0))
	require.Eventually(t, func() bool { return rejected() >= 2 }, 10*time.Second, 20*time.Millisecond)
	mark := time.Now()
	time.Sleep(300 * time.Millisecond)
	for _, r := range log.since(mark) {
		require.NoError(t, r.err)
		require.Equal(t, b, r.cluster, "the last good configuration keeps serving")
	}

	stopLoad()
	wg.Wait()
	all := log.since(time.Time{})
	for _, r := range all {
		require.NoError(t, r.err, "a send failed during a reload")
	}
	require.Len(t, drain(t, env, "feed"), len(all), "every acknowledged send is stored")
	require.Positive(t, metricValue(t, reg, "twinmq_producer_sends_total", map[string]string{"cluster": b, "result": resultOK}))
}

// A reload that points a cluster at other endpoints, and changes the batch
// limits, takes effect while sends continue, and loses nothing.
func TestHotReloadMovesEndpointsAndLimits(t *testing.T) {
	env := startEnv(t, "feed", "news")
	ca, cb := env.Clusters()[0], env.Clusters()[1]
	doc := func(endpoints []string, maxDelay time.Duration, batchMax int, extra ...string) *config.Config {
		cfg := config.Default()
		cfg.Batching.MaxDelay = config.Duration(maxDelay)
		cfg.Batching.BatchMaxBytes = batchMax
		cfg.Topics = map[string]config.Topic{}
		for _, topic := range append([]string{"feed"}, extra...) {
			cfg.Topics[topic] = config.Topic{Clusters: []config.Cluster{
				{Name: "dc", Endpoints: endpoints, Topic: topic, Weight: 100},
			}}
		}
		return cfg
	}
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: doc(ca.Endpoints(), 10*time.Millisecond, 64<<10), Revision: "1"}
	p := newProducer(t, WithSource(config.Chan(versions)))
	require.Equal(t, 64<<10, p.acc.Limits().BatchMaxBytes)

	loadCtx, stopLoad := context.WithCancel(context.Background())
	log := &sendLog{}
	wg := steadyLoad(loadCtx, p, "feed", 4, time.Millisecond, log)
	defer func() { stopLoad(); wg.Wait() }()

	onlyOn := func(c *embedded.Cluster) func() bool {
		return func() bool { return recentClusters(log, 50)["dc"] == 50 && recentEndpointsIn(log, 50, c.Endpoints()) }
	}
	require.Eventually(t, onlyOn(ca), 10*time.Second, 20*time.Millisecond)

	versions <- config.Version{Config: doc(cb.Endpoints(), 20*time.Millisecond, 128<<10), Revision: "2"}
	require.Eventually(t, onlyOn(cb), 10*time.Second, 20*time.Millisecond, "traffic follows the new endpoints")
	require.Equal(t, 128<<10, p.acc.Limits().BatchMaxBytes)
	require.Equal(t, 20*time.Millisecond, p.acc.Limits().MaxDelay)

	// A topic added by a reload is usable at once; one removed is unknown.
	ctx := testCtx(t)
	_, err := p.Send(ctx, &Message{Topic: "news", Body: []byte("early")})
	require.ErrorIs(t, err, ErrUnknownTopic)
	versions <- config.Version{Config: doc(cb.Endpoints(), 20*time.Millisecond, 128<<10, "news"), Revision: "3"}
	require.Eventually(t, func() bool {
		_, err := p.Send(ctx, &Message{Topic: "news", Body: []byte("fresh")})
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	versions <- config.Version{Config: doc(cb.Endpoints(), 20*time.Millisecond, 128<<10), Revision: "4"}
	require.Eventually(t, func() bool {
		_, err := p.Send(ctx, &Message{Topic: "news", Body: []byte("gone")})
		return errors.Is(err, ErrUnknownTopic)
	}, 10*time.Second, 10*time.Millisecond)

	stopLoad()
	wg.Wait()
	all := log.since(time.Time{})
	for _, r := range all {
		require.NoError(t, r.err)
	}
	require.Len(t, drain(t, env, "feed"), len(all), "every acknowledged send is stored")
}

// recentEndpointsIn reports whether the last n successful sends all went to
// one of endpoints.
func recentEndpointsIn(log *sendLog, n int, endpoints []string) bool {
	log.mu.Lock()
	defer log.mu.Unlock()
	for i := len(log.recs) - 1; i >= 0 && n > 0; i-- {
		if r := log.recs[i]; r.err == nil {
			if !slices.Contains(endpoints, r.endpoint) {
				return false
			}
			n--
		}
	}
	return n == 0
}
