package producer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// A reload that changes the failover section retunes the topic's picker in
// place. These tests cover what a retired picker used to break: metric
// series, route lookups and sends that were in flight during the reload.

// tuningApplied waits until the producer runs topic with probe as its
// failover probe interval.
func tuningApplied(t *testing.T, p *Producer, topic string, probe time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		ts := (*p.topics.Load())[topic]
		p.mu.Lock()
		defer p.mu.Unlock()
		return ts != nil && ts.fcfg.ProbeInterval.D() == probe
	}, 10*time.Second, 10*time.Millisecond)
}

func retuneWeightSeries(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "twinmq_failover_weight" {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func TestFailoverRetuneKeepsWeightSeries(t *testing.T) {
	env := startEnv(t, "feed")
	doc := func(probe time.Duration) *config.Config {
		cfg := docFor(env, "feed")
		cfg.Failover.ProbeInterval = config.Duration(probe)
		return cfg
	}
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: doc(time.Second), Revision: "1"}
	reg := prometheus.NewRegistry()
	p := newProducer(t, WithSource(config.Chan(versions)), WithRegisterer(reg))
	require.Equal(t, 4, retuneWeightSeries(t, reg), "two clusters of two brokers")

	versions <- config.Version{Config: doc(2 * time.Second), Revision: "2"}
	tuningApplied(t, p, "feed", 2*time.Second)
	ctx := testCtx(t)
	for range 20 {
		_, err := p.Send(ctx, &Message{Topic: "feed", Body: []byte("x")})
		require.NoError(t, err)
	}
	require.Equal(t, 4, retuneWeightSeries(t, reg), "weight series after the failover section changed")
}

// A cluster that does not answer its route query while the failover
// section changes joins the topic once it answers.
func TestFailoverRetuneDuringRouteLookup(t *testing.T) {
	env := startEnv(t, "feed")
	slow := env.Clusters()[1]
	for _, b := range slow.Brokers() {
		b.Pause()
	}
	paused := true
	defer func() {
		if paused {
			for _, b := range slow.Brokers() {
				b.Resume()
			}
		}
	}()
	doc := func(probe time.Duration) *config.Config {
		cfg := docFor(env, "feed")
		cfg.Timeouts.Request = config.Duration(20 * time.Second)
		cfg.Timeouts.SendDeadline = config.Duration(20 * time.Second)
		cfg.Failover.ProbeInterval = config.Duration(probe)
		return cfg
	}
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: doc(time.Second), Revision: "1"}
	// New waits for routes only as long as its context, so the paused
	// cluster stays without brokers and its route query keeps running.
	nctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	p, err := New(nctx, WithSource(config.Chan(versions)))
	cancel()
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	time.Sleep(1500 * time.Millisecond) // the route loop queries the paused cluster

	versions <- config.Version{Config: doc(2 * time.Second), Revision: "2"}
	tuningApplied(t, p, "feed", 2*time.Second)
	for _, b := range slow.Brokers() {
		b.Resume()
	}
	paused = false

	ts := (*p.topics.Load())["feed"]
	require.Eventually(t, func() bool {
		for _, h := range ts.picker.Handles() {
			if strings.HasPrefix(h.Key(), slow.Name+"/") {
				return true
			}
		}
		return false
	}, 15*time.Second, 50*time.Millisecond, "the cluster answered but its brokers never joined the picker")
}

// A send retrying on a dead cluster follows a reload that moves the topic
// to live endpoints, also when the reload changes the failover section.
func TestInflightSendFollowsReload(t *testing.T) {
	for _, retune := range []bool{false, true} {
		t.Run(map[bool]string{false: "endpoints", true: "endpoints+failover"}[retune], func(t *testing.T) {
			env := startEnv(t, "feed")
			dead, live := env.Clusters()[0], env.Clusters()[1]
			doc := func(endpoints []string, probe time.Duration) *config.Config {
				cfg := config.Default()
				cfg.Failover.ProbeInterval = config.Duration(probe)
				cfg.Topics = map[string]config.Topic{"feed": {Clusters: []config.Cluster{
					{Name: "dc", Endpoints: endpoints, Topic: "feed", Weight: 100},
				}}}
				return cfg
			}
			versions := make(chan config.Version, 1)
			versions <- config.Version{Config: doc(dead.Endpoints(), time.Second), Revision: "1"}
			p := newProducer(t, WithSource(config.Chan(versions)))
			ctx := testCtx(t)
			_, err := p.Send(ctx, &Message{Topic: "feed", Body: []byte("warm")})
			require.NoError(t, err)
			for _, b := range dead.Brokers() {
				require.NoError(t, b.Stop(ctx))
			}

			done := make(chan error, 1)
			go func() {
				sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				_, err := p.Send(sctx, &Message{Topic: "feed", Body: []byte("moving")})
				done <- err
			}()
			time.Sleep(time.Second) // the send retries on the stopped brokers

			probe := time.Second
			if retune {
				probe = 2 * time.Second
			}
			versions <- config.Version{Config: doc(live.Endpoints(), probe), Revision: "2"}
			select {
			case err := <-done:
				require.NoError(t, err, "the send should have moved to the new endpoints")
			case <-time.After(20 * time.Second):
				t.Fatal("the send never returned")
			}
		})
	}
}
