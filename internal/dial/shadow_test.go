package dial

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

const shadowProbeTopic = probeTopic + "-shadow"

// drainGroups are the groups tests read the topics with, besides the
// dial's shadow group: the brokers know no other.
var drainGroups = []string{"drain-1", "drain-2", "drain-3", "drain-4", "drain-5", "drain-6"}

// startShadowEnv starts two clusters of two brokers with the probe topic
// and its shadow topic, which refuse every group but the dial's shadow
// group and the drain groups, and a Watcher on a document whose shadow rule
// names the shadow topic and group.
func startShadowEnv(tb testing.TB) (*embedded.Env, *config.Watcher, chan config.Version) {
	tb.Helper()
	ctx := context.Background()
	groups := []embedded.Group{{Name: DefaultGroup + "-shadow"}}
	for _, g := range drainGroups {
		groups = append(groups, embedded.Group{Name: g})
	}
	env, err := embedded.Start(ctx, embedded.Options{
		Topics: []embedded.Topic{
			{Name: probeTopic, Queues: 2, Type: embedded.Mixed},
			{Name: shadowProbeTopic, Queues: 2, Type: embedded.Mixed},
		},
		Groups:               groups,
		StrictGroups:         true,
		MinLongPolling:       50 * time.Millisecond,
		MinInvisibleDuration: time.Second,
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = env.Close(context.Background()) })
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{probeTopic: env.TopicConfig(probeTopic)}
	cfg.Shadow = config.Shadow{Enabled: true, TopicSuffix: "-shadow", GroupSuffix: "-shadow"}
	cfg.Timeouts.Request = config.Duration(time.Second)
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: cfg, Revision: "1"}
	w, err := config.Start(ctx, config.Chan(versions), config.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = w.Close() })
	return env, w, versions
}

// readTopic receives, in a group of its own, every message of topic stored
// on the brokers of env, without acking, and returns them by message id:
// what the brokers really hold.
func readTopic(t testing.TB, env *embedded.Env, topic, group string) map[string]*driver.ReceivedMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := driver.New(driver.Config{Type: driver.SimpleConsumer, Group: group,
		Subscriptions: []driver.Subscription{{Topic: topic}}})
	require.NoError(t, err)
	defer func() { _ = c.Close(ctx) }()
	out := map[string]*driver.ReceivedMessage{}
	for _, cl := range env.Clusters() {
		for _, b := range cl.Brokers() {
			route, err := c.QueryRoute(ctx, b.Endpoint(), topic)
			require.NoError(t, err)
			for _, q := range route.ReadableQueues() {
				if q.Endpoint != b.Endpoint() {
					continue
				}
				for {
					msgs, err := c.Receive(ctx, driver.ReceiveRequest{Queue: q, BatchSize: 32,
						InvisibleDuration: time.Minute, LongPollingTimeout: 50 * time.Millisecond})
					require.NoError(t, err)
					if len(msgs) == 0 {
						break
					}
					for _, m := range msgs {
						out[m.ID] = m
					}
				}
			}
		}
	}
	return out
}

// requireShadowOnly reads both topics: nothing in the production topic,
// and every message of the shadow topic a marked probe. It returns the
// shadow topic's count.
func requireShadowOnly(t *testing.T, env *embedded.Env, prodGroup, shadowGroup string) int {
	t.Helper()
	require.Empty(t, readTopic(t, env, probeTopic, prodGroup), "no probe in the production topic")
	shadow := readTopic(t, env, shadowProbeTopic, shadowGroup)
	for id, m := range shadow {
		require.Equal(t, Tag, m.Tag, id)
		require.Equal(t, lane.ShadowValue, m.Properties[lane.PropertyShadow], "probe %s carries the shadow marker", id)
	}
	return len(shadow)
}

// In shadow mode every probe of every kind goes to the shadow topic with
// the marker and comes back through the shadow group (the brokers refuse
// the production one); the kill switch stops the probes live and a reload
// that turns it on again resumes them, still in the shadow topic only.
func TestShadowProbesStayOutOfProduction(t *testing.T) {
	env, w, versions := startShadowEnv(t)
	reg := prometheus.NewRegistry()
	delay := 200 * time.Millisecond
	d, err := New(context.Background(), w, Options{
		Shadow: true, Rate: 20, Period: 2 * time.Second, Delay: delay,
		LongPolling: 200 * time.Millisecond, InvisibleDuration: 5 * time.Second, Registerer: reg,
	})
	require.NoError(t, err)
	defer func() { _ = d.Close(context.Background()) }()
	allBack := func() bool {
		st := d.Status()
		if len(st) != 4 {
			return false
		}
		for _, s := range st {
			if s.Received < 6 { // every kind, twice
				return false
			}
		}
		return true
	}
	require.Eventually(t, allBack, 20*time.Second, 20*time.Millisecond, "every broker's shadow probes come back")
	var received uint64
	for _, s := range d.Status() {
		require.Zero(t, s.SendErrors, s.Broker.String())
		received += s.Received
	}

	// The kill switch, live.
	off := w.Current().Clone()
	off.Shadow.Enabled = false
	versions <- config.Version{Config: off, Revision: "2"}
	require.Eventually(t, func() bool { return len(d.Status()) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the kill switch stops the probes and drops their brokers")
	time.Sleep(2 * delay) // the last delayed probes fall due
	n1 := requireShadowOnly(t, env, "drain-1", "drain-2")
	require.GreaterOrEqual(t, uint64(n1), received, "every probe received was in the shadow topic")
	time.Sleep(time.Second) // 80 probes at the rate, had they gone on
	require.Equal(t, n1, requireShadowOnly(t, env, "drain-3", "drain-4"), "no probe sent with the kill switch off")

	// On again: probing resumes, in the shadow topic.
	on := off.Clone()
	on.Shadow.Enabled = true
	versions <- config.Version{Config: on, Revision: "3"}
	require.Eventually(t, allBack, 20*time.Second, 20*time.Millisecond, "probing resumes when the switch is back on")
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, d.Close(cctx))
	time.Sleep(2 * delay)
	require.Greater(t, requireShadowOnly(t, env, "drain-5", "drain-6"), n1)
	require.Empty(t, clientGoroutines())
}

// New refuses shadow mode, with a typed error and nothing left running or
// registered, on a document that cannot carry it.
func TestShadowRefused(t *testing.T) {
	ctx := context.Background()
	base := config.Default()
	base.Topics = map[string]config.Topic{
		"t": {Clusters: []config.Cluster{{Name: "a", Endpoints: []string{"127.0.0.1:1"}, Topic: "t", Weight: 100}}},
	}
	base.Shadow = config.Shadow{Enabled: true, TopicSuffix: "-shadow", GroupSuffix: "-shadow"}
	noTopics := base.Clone()
	noTopics.Shadow = config.Shadow{Enabled: true}
	off := base.Clone()
	off.Shadow.Enabled = false
	for name, cfg := range map[string]*config.Config{"no shadow topics": noTopics, "kill switch off": off} {
		t.Run(name, func(t *testing.T) {
			versions := make(chan config.Version, 1)
			versions <- config.Version{Config: cfg, Revision: "1"}
			w, err := config.Start(ctx, config.Chan(versions), config.Options{})
			require.NoError(t, err)
			defer func() { _ = w.Close() }()
			reg := prometheus.NewRegistry()
			_, err = New(ctx, w, Options{Shadow: true, Registerer: reg})
			require.ErrorIs(t, err, ErrShadowUnavailable)
			n, err := testutil.GatherAndCount(reg)
			require.NoError(t, err)
			require.Zero(t, n)
			require.Empty(t, clientGoroutines())
			// The same document dials production without complaint.
			d, err := New(ctx, w, Options{})
			require.NoError(t, err)
			require.NoError(t, d.Close(ctx))
		})
	}
}
