package producer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/lane"
)

func shadowCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(lane.WithShadow(context.Background(), true), d)
}

// TestShadowRefusedWithoutShadowTopic: a shadow send to a topic the
// document gives no shadow topic fails at once with ErrNoShadowTopic, and
// with the kill switch off with ErrShadowDisabled; neither is sent to the
// production topic, which keeps working.
func TestShadowRefusedWithoutShadowTopic(t *testing.T) {
	const topic = "shp_plain"
	env := startEnv(t, topic)
	cfg := docFor(env, topic)
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: cfg, Revision: "none"}
	p := newProducer(t, WithSource(config.Chan(versions)))

	ctx, cancel := shadowCtx(10 * time.Second)
	defer cancel()
	_, err := p.Send(ctx, &Message{Topic: topic, Body: []byte("s")})
	require.ErrorIs(t, err, ErrNoShadowTopic)
	_, err = p.Send(ctx, &Message{Topic: "shp_unknown", Body: []byte("s")})
	require.ErrorIs(t, err, ErrUnknownTopic)
	r, err := p.Send(context.Background(), &Message{Topic: topic, Body: []byte("p")})
	require.NoError(t, err)
	assert.False(t, r.Shadow)

	off := cfg.Clone()
	off.Shadow = config.Shadow{Enabled: false, TopicSuffix: "_sh", GroupSuffix: "_sh"}
	versions <- config.Version{Config: off, Revision: "off"}
	require.Eventually(t, func() bool {
		_, err := p.Send(ctx, &Message{Topic: topic, Body: []byte("s")})
		return errors.Is(err, ErrShadowDisabled)
	}, 30*time.Second, 10*time.Millisecond)

	stored := drain(t, env, topic)
	require.Len(t, stored, 1, "only the production message is stored")
	require.Contains(t, stored, r.MessageID)
}

// TestShadowTopicMissingOnBrokers: the rule names a shadow topic the
// brokers lack. The shadow send fails with ErrNoShadowTopic (and
// ErrNoTarget) within its deadline rather than falling back to the
// production topic.
func TestShadowTopicMissingOnBrokers(t *testing.T) {
	const topic = "shp_lonely"
	env := startEnv(t, topic)
	cfg := docFor(env, topic)
	cfg.Shadow = config.Shadow{Enabled: true, TopicSuffix: "_shadow", GroupSuffix: "_shadow"}
	cfg.Timeouts.Request = config.Duration(500 * time.Millisecond)
	p := newProducer(t, WithConfig(cfg))

	ctx, cancel := shadowCtx(2 * time.Second)
	defer cancel()
	_, err := p.Send(ctx, &Message{Topic: topic, Body: []byte("s")})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoShadowTopic)
	assert.ErrorIs(t, err, ErrNoTarget)
	assert.Empty(t, drain(t, env, topic), "nothing reached the production topic")
}

// TestShadowSidesApart: shadow and production sends, concurrent and
// batched, some in a lane, before and after a reload that moves the shadow
// topics from the naming rule to per-cluster shadowTopic: each message is
// stored on its own side only (counted by id on the brokers), stamped with
// the mark and its lane, and counted under its shadow label.
func TestShadowSidesApart(t *testing.T) {
	const topic = "shp_orders"
	env := startEnv(t, topic, topic+"_shadow", topic+"_stress")
	cfg := docFor(env, topic)
	cfg.Shadow = config.Shadow{Enabled: true, TopicSuffix: "_shadow", GroupSuffix: "_shadow"}
	cfg.Batching.MaxDelay = config.Duration(20 * time.Millisecond)
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: cfg, Revision: "rule"}
	reg := prometheus.NewRegistry()
	p := newProducer(t, WithSource(config.Chan(versions)), WithRegisterer(reg))

	want := map[string]string{} // id -> physical topic
	sendAll := func(n int, shadowTopic string) {
		type out struct {
			r      *SendResult
			err    error
			shadow bool
		}
		ch := make(chan out, n)
		for i := 0; i < n; i++ {
			go func() {
				shadow := i%2 == 0
				ctx, cancel := context.WithTimeout(lane.WithShadow(context.Background(), shadow), 20*time.Second)
				defer cancel()
				if i%4 < 2 {
					ctx = lane.WithLane(ctx, "gray")
				}
				r, err := p.Send(ctx, &Message{Topic: topic, Body: []byte(fmt.Sprint(i))})
				ch <- out{r, err, shadow}
			}()
		}
		for i := 0; i < n; i++ {
			o := <-ch
			require.NoError(t, o.err)
			assert.Equal(t, o.shadow, o.r.Shadow)
			if o.shadow {
				assert.Equal(t, shadowTopic, o.r.PhysicalTopic)
			} else {
				assert.Equal(t, topic, o.r.PhysicalTopic)
			}
			want[o.r.MessageID] = o.r.PhysicalTopic
		}
	}
	sendAll(200, topic+"_shadow")

	next := cfg.Clone()
	tc := next.Topics[topic]
	for i := range tc.Clusters {
		tc.Clusters[i].ShadowTopic = topic + "_stress"
	}
	next.Topics[topic] = tc
	next.Shadow.TopicSuffix = ""
	require.NoError(t, next.Validate())
	versions <- config.Version{Config: next, Revision: "per-cluster"}
	require.Eventually(t, func() bool {
		ctx, cancel := shadowCtx(20 * time.Second)
		defer cancel()
		r, err := p.Send(ctx, &Message{Topic: topic, Body: []byte("probe")})
		if err != nil {
			return false
		}
		want[r.MessageID] = r.PhysicalTopic
		return r.PhysicalTopic == topic+"_stress"
	}, 30*time.Second, 10*time.Millisecond)
	sendAll(200, topic+"_stress")

	crossings := 0
	for _, physical := range []string{topic, topic + "_shadow", topic + "_stress"} {
		for id, m := range drain(t, env, physical) {
			w, ok := want[id]
			require.True(t, ok, "unknown message %s in %s", id, physical)
			if w != physical {
				crossings++
			}
			shadow := physical != topic
			assert.Equal(t, shadow, m.Properties[lane.PropertyShadow] == lane.ShadowValue, "mark of %s in %s", id, physical)
			delete(want, id)
		}
	}
	st := p.State().Topics
	require.Len(t, st, 2)
	assert.Equal(t, [2]bool{false, true}, [2]bool{st[0].Shadow, st[1].Shadow}, "the shadow side right after its production side")
	for i, side := range st {
		assert.Equal(t, topic, side.Name)
		for _, c := range side.Clusters {
			assert.Equal(t, map[int]string{0: topic, 1: topic + "_stress"}[i], c.PhysicalTopic)
		}
	}
	assert.Zero(t, crossings)
	assert.Empty(t, want, "every acknowledged message is stored")
	assert.Positive(t, metricValue(t, reg, "twinmq_producer_sends_total", map[string]string{"shadow": "true", "result": resultOK}))
	assert.Positive(t, metricValue(t, reg, "twinmq_producer_sends_total", map[string]string{"shadow": "false", "result": resultOK}))
}
