package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

// shadowEnv starts two clusters of two brokers with the logic topics and
// their shadow topics (suffix "_shadow"), and returns a document mapping
// the topics with that naming rule and group suffix "_shadow".
func shadowEnv(t *testing.T, group string, topics ...string) (*embedded.Env, *config.Config) {
	t.Helper()
	var all []string
	for _, tp := range topics {
		all = append(all, tp, tp+"_shadow")
	}
	env := startEnvTopics(t, all)
	cfg := docFor(env, topics[0], group, config.Consumer{Concurrency: 16})
	for _, tp := range topics[1:] {
		cfg.Topics[tp] = env.TopicConfig(tp)
	}
	cfg.Shadow = config.Shadow{Enabled: true, TopicSuffix: "_shadow", GroupSuffix: "_shadow"}
	cfg.Timeouts.Request = config.Duration(time.Second)
	cfg.Failover.ProbeInterval = config.Duration(200 * time.Millisecond)
	require.NoError(t, cfg.Validate())
	return env, cfg
}

// startWatcher serves versions pushed on the returned channel to every
// producer and consumer built on the watcher.
func startWatcher(t *testing.T, first *config.Config) (*config.Watcher, chan<- config.Version) {
	t.Helper()
	in := make(chan config.Version, 1)
	in <- config.Version{Config: first, Revision: "v1"}
	w, err := config.Start(context.Background(), config.Chan(in), config.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w, in
}

func newTestProducer(t *testing.T, opts ...producer.Option) *producer.Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := producer.New(ctx, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// seen is what a handler observed of one message.
type seen struct {
	shadowCtx bool   // lane.IsShadow of the handler's ctx
	shadowMsg bool   // Message.Shadow
	physical  string // where it was stored
	lane      string // lane of the handler's ctx
	origin    string // for a downstream message: the id it was sent for
}

type observed struct {
	mu   sync.Mutex
	byID map[string][]seen
}

func (o *observed) add(id string, s seen) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.byID[id] = append(o.byID[id], s)
}

func (o *observed) waitFor(t *testing.T, ids []string) {
	t.Helper()
	require.Eventually(t, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, id := range ids {
			if len(o.byID[id]) == 0 {
				return false
			}
		}
		return true
	}, waitLong, 20*time.Millisecond, "every message handled")
}

// TestShadowMixedRun: half of the traffic is shadow, some of it in a lane;
// in the middle a whole cluster stops (failover) and the document is
// reloaded. Counted by message id: no shadow message is stored in or
// received from a production topic and no production message from a
// shadow one; every message is handled with the right mark in its ctx;
// what the handler sends downstream keeps the mark, and lands on the
// downstream topic's matching side.
func TestShadowMixedRun(t *testing.T) {
	const (
		topic, down, group, auditGroup = "sh_orders", "sh_audit", "sh_billing", "sh_auditor"
		total                          = 400
	)
	env, cfg := shadowEnv(t, group, topic, down)
	w, versions := startWatcher(t, cfg)
	reg := prometheus.NewRegistry()
	p := newTestProducer(t, producer.WithWatcher(w), producer.WithRegisterer(reg))

	var handled, downstream observed
	handled.byID, downstream.byID = map[string][]seen{}, map[string][]seen{}
	var downErrs atomic.Int64
	newConsumer(t, group, topic, func(ctx context.Context, m *Message) error {
		l, _ := lane.FromContext(ctx)
		handled.add(m.ID, seen{shadowCtx: lane.IsShadow(ctx), shadowMsg: m.Shadow, physical: m.PhysicalTopic, lane: l})
		// Downstream with the handler's ctx, as a service would.
		_, err := p.Send(ctx, &producer.Message{Topic: down, Body: []byte(m.ID)})
		if err != nil {
			downErrs.Add(1)
		}
		return err
	}, WithWatcher(w), WithRegisterer(reg), WithInstanceName("billing-1"))
	newConsumer(t, auditGroup, down, func(ctx context.Context, m *Message) error {
		downstream.add(m.ID, seen{shadowCtx: lane.IsShadow(ctx), shadowMsg: m.Shadow, physical: m.PhysicalTopic, origin: string(m.Body)})
		return nil
	}, WithWatcher(w), WithInstanceName("auditor-1"))

	var (
		mu       sync.Mutex
		isShade  = map[string]bool{}
		sendErr  []error
		phaseTwo bool
		// cluster -> side -> sends stored there while the first cluster
		// was stopped.
		during = map[string]map[bool]int{}
	)
	send := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shadow := i%2 == 1
		ctx = lane.WithShadow(ctx, shadow)
		if i%3 == 0 {
			ctx = lane.WithLane(ctx, "a.x")
		}
		r, err := p.Send(ctx, &producer.Message{Topic: topic, Body: []byte(fmt.Sprintf("m-%d", i))})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			sendErr = append(sendErr, err)
			return
		}
		isShade[r.MessageID] = shadow
		if phaseTwo {
			if during[r.Cluster] == nil {
				during[r.Cluster] = map[bool]int{}
			}
			during[r.Cluster][shadow]++
		}
		if r.Shadow != shadow || (r.PhysicalTopic == topic+"_shadow") != shadow {
			sendErr = append(sendErr, fmt.Errorf("message %s (shadow %v) stored in %s, result shadow %v", r.MessageID, shadow, r.PhysicalTopic, r.Shadow))
		}
	}
	phase := func(from, to int) {
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + g; i < to; i += 8 {
					send(i)
				}
			}()
		}
		wg.Wait()
	}

	phase(0, total/3)
	// Failover: the first cluster stops as a whole.
	stopped := env.Clusters()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range stopped.Brokers() {
		require.NoError(t, b.Stop(ctx))
	}
	mu.Lock()
	phaseTwo = true
	mu.Unlock()
	phase(total/3, 2*total/3)
	mu.Lock()
	phaseTwo = false
	running := env.Clusters()[1].Name
	assert.Len(t, during, 1, "while a cluster is stopped, every send is stored on the other: %v", during)
	assert.Positive(t, during[running][false], "production failed over")
	assert.Positive(t, during[running][true], "shadow failed over")
	assert.Equal(t, 2*total/3-total/3, during[running][false]+during[running][true])
	mu.Unlock()
	// Reload: new weights and batching, more concurrency.
	next := cfg.Clone()
	tc := next.Topics[topic]
	tc.Clusters[1].Weight = 300
	next.Topics[topic] = tc
	next.Batching.MaxDelay = config.Duration(5 * time.Millisecond)
	cs := next.Consumers[group]
	cs.Concurrency = 24
	next.Consumers[group] = cs
	versions <- config.Version{Config: next, Revision: "v2"}
	require.Eventually(t, func() bool { return w.Revision() == "v2" }, waitLong, 10*time.Millisecond)
	phase(2*total/3, total)
	for _, b := range stopped.Brokers() {
		require.NoError(t, b.Restart(ctx))
	}

	mu.Lock()
	require.Empty(t, sendErr, "every send succeeded on its own side")
	ids := make([]string, 0, len(isShade))
	for id := range isShade {
		ids = append(ids, id)
	}
	mu.Unlock()
	require.Len(t, ids, total)
	handled.waitFor(t, ids)

	// Crossings, counted by message id, as the handlers saw them.
	var shadowToProd, prodToShadow, wrongCtx int
	for _, id := range ids {
		for _, s := range handled.byID[id] {
			switch {
			case isShade[id] && s.physical != topic+"_shadow":
				shadowToProd++
			case !isShade[id] && s.physical != topic:
				prodToShadow++
			}
			if s.shadowCtx != isShade[id] || s.shadowMsg != isShade[id] {
				wrongCtx++
			}
		}
	}
	// And as the brokers stored them (a group of its own reads both sides).
	for _, m := range drainTopic(t, env, topic, "sh_check") {
		if isShade[m.ID] {
			shadowToProd++
		}
	}
	for _, m := range drainTopic(t, env, topic+"_shadow", "sh_check") {
		if _, ok := isShade[m.ID]; ok && !isShade[m.ID] {
			prodToShadow++
		}
	}
	t.Logf("shadow in production: %d, production in shadow: %d, wrong ctx mark: %d", shadowToProd, prodToShadow, wrongCtx)
	assert.Zero(t, shadowToProd, "shadow messages in a production topic")
	assert.Zero(t, prodToShadow, "production messages in a shadow topic")
	assert.Zero(t, wrongCtx, "handlers whose ctx mark differs from the message's side")

	// Downstream: one message per handled one, on the same side.
	require.Eventually(t, func() bool {
		downstream.mu.Lock()
		defer downstream.mu.Unlock()
		got := map[string]bool{}
		for _, ss := range downstream.byID {
			for _, s := range ss {
				got[s.origin] = true
			}
		}
		return len(got) == total
	}, waitLong, 20*time.Millisecond, "every handled message sent downstream and handled there")
	downstream.mu.Lock()
	var downCross int
	for id, ss := range downstream.byID {
		for _, s := range ss {
			shadow, ok := isShade[s.origin]
			require.True(t, ok, "downstream message %s names an unknown origin %q", id, s.origin)
			if s.shadowCtx != shadow || s.shadowMsg != shadow || (s.physical == down+"_shadow") != shadow {
				downCross++
			}
		}
	}
	downstream.mu.Unlock()
	assert.Zero(t, downCross, "downstream messages that lost or gained the mark")
	assert.Zero(t, downErrs.Load())

	// The metrics tell the two sides apart.
	assert.Positive(t, testutil.ToFloat64(mustVec(t, reg, "twinmq_consumer_handled_total", map[string]string{"group": group, "shadow": "true", "result": "ok"})))
	assert.Positive(t, testutil.ToFloat64(mustVec(t, reg, "twinmq_consumer_handled_total", map[string]string{"group": group, "shadow": "false", "result": "ok"})))
}

// mustVec finds the summed value of the series of name whose labels include
// want, as a collector testutil can read.
func mustVec(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			found = true
			sum += m.GetCounter().GetValue()
		}
	}
	require.True(t, found, "no series %s%v", name, want)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sum"})
	g.Set(sum)
	return g
}

// TestShadowKillSwitch: turning shadow.enabled off makes shadow sends fail
// with producer.ErrShadowDisabled and stops shadow consumption (a shadow
// message stored meanwhile waits, unhandled, in the shadow topic), while
// production goes on; turning it on again resumes both, and the waiting
// message is handled then, in the shadow group.
func TestShadowKillSwitch(t *testing.T) {
	const topic, group = "ks_orders", "ks_billing"
	env, cfg := shadowEnv(t, group, topic)
	w, versions := startWatcher(t, cfg)
	p := newTestProducer(t, producer.WithWatcher(w))
	var handled observed
	handled.byID = map[string][]seen{}
	c := newConsumer(t, group, topic, func(ctx context.Context, m *Message) error {
		handled.add(m.ID, seen{shadowCtx: lane.IsShadow(ctx), physical: m.PhysicalTopic})
		return nil
	}, WithWatcher(w))

	sendOne := func(shadow bool) (*producer.SendResult, error) {
		ctx, cancel := context.WithTimeout(lane.WithShadow(context.Background(), shadow), 20*time.Second)
		defer cancel()
		return p.Send(ctx, &producer.Message{Topic: topic, Body: []byte("x")})
	}
	r, err := sendOne(true)
	require.NoError(t, err)
	handled.waitFor(t, []string{r.MessageID})
	// The inner consumer may handle its first message a moment before its
	// start returns and ShadowState reports it.
	require.Eventually(t, func() bool {
		_, ok, _ := c.ShadowState()
		return ok
	}, waitLong, 10*time.Millisecond, "the shadow side runs")

	off := cfg.Clone()
	off.Shadow.Enabled = false
	versions <- config.Version{Config: off, Revision: "off"}
	require.Eventually(t, func() bool {
		_, err := sendOne(true)
		return errors.Is(err, producer.ErrShadowDisabled)
	}, waitLong, 10*time.Millisecond, "shadow sends fail once the switch is off")
	require.Eventually(t, func() bool {
		_, ok, _ := c.ShadowState()
		return !ok
	}, waitLong, 10*time.Millisecond, "shadow consumption stops")
	prod, err := sendOne(false)
	require.NoError(t, err, "production is not affected")
	handled.waitFor(t, []string{prod.MessageID})

	// Store a shadow message while the consumer's shadow side is off: send
	// it straight to the shadow topic as a foreign producer would.
	s := newSender(t, env, topic+"_shadow")
	waiting := s.send(1, 1, "")
	time.Sleep(time.Second)
	handled.mu.Lock()
	assert.Empty(t, handled.byID[waiting[0]], "no shadow consumption while the switch is off")
	handled.mu.Unlock()

	on := cfg.Clone()
	versions <- config.Version{Config: on, Revision: "on"}
	require.Eventually(t, func() bool {
		_, err := sendOne(true)
		return err == nil
	}, waitLong, 10*time.Millisecond, "shadow sends work again")
	handled.waitFor(t, waiting)
	handled.mu.Lock()
	defer handled.mu.Unlock()
	for _, s := range handled.byID[waiting[0]] {
		assert.True(t, s.shadowCtx, "a message of the shadow topic is handled as shadow")
		assert.Equal(t, topic+"_shadow", s.physical)
	}
}

// TestShadowRetriesAndDeadLettersApart: a message that always fails, once
// on each side, is redelivered on its own side with its own attempt count
// and dead-lettered in its own group's dead-letter topic: the production
// one in G's, the shadow one in the shadow group's.
func TestShadowRetriesAndDeadLettersApart(t *testing.T) {
	const topic, group = "dl_orders", "dl_billing"
	env, cfg := shadowEnv(t, group, topic)
	cs := cfg.Consumers[group]
	cs.MaxAttempts = 3
	cfg.Consumers[group] = cs
	w, _ := startWatcher(t, cfg)
	p := newTestProducer(t, producer.WithWatcher(w))

	var (
		mu       sync.Mutex
		attempts = map[string][]int{}
		side     = map[string][]bool{}
	)
	c := newConsumer(t, group, topic, func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[m.ID] = append(attempts[m.ID], m.DeliveryAttempt)
		side[m.ID] = append(side[m.ID], lane.IsShadow(ctx))
		return errors.New("poison never works")
	}, WithWatcher(w), WithRetryBackoff(func(int) time.Duration { return 100 * time.Millisecond }))

	send := func(shadow bool) string {
		ctx, cancel := context.WithTimeout(lane.WithShadow(context.Background(), shadow), 20*time.Second)
		defer cancel()
		r, err := p.Send(ctx, &producer.Message{Topic: topic, Body: []byte("poison")})
		require.NoError(t, err)
		return r.MessageID
	}
	prodID, shadowID := send(false), send(true)

	dlqIDs := func(g string) []string {
		var ids []string
		for _, m := range drainTopic(t, env, embedded.DLQTopic(g), "dl_reader_"+g) {
			id := m.ID
			if m.DeadLetter != nil && m.DeadLetter.MessageID != "" {
				id = m.DeadLetter.MessageID
			}
			ids = append(ids, id)
		}
		return ids
	}
	var prodDLQ, shadowDLQ []string
	require.Eventually(t, func() bool {
		mu.Lock()
		done := len(attempts[prodID]) >= 3 && len(attempts[shadowID]) >= 3
		mu.Unlock()
		if !done {
			return false
		}
		prodDLQ, shadowDLQ = dlqIDs(group), dlqIDs(group+"_shadow")
		return len(prodDLQ) > 0 && len(shadowDLQ) > 0
	}, waitLong, 50*time.Millisecond)
	inner, ok, _ := c.ShadowState()
	require.True(t, ok)
	assert.Equal(t, group+"_shadow", inner.Group)

	assert.Equal(t, []string{prodID}, prodDLQ, "the production group's dead letters")
	assert.Equal(t, []string{shadowID}, shadowDLQ, "the shadow group's dead letters")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{1, 2, 3}, attempts[prodID])
	assert.Equal(t, []int{1, 2, 3}, attempts[shadowID])
	assert.Equal(t, []bool{false, false, false}, side[prodID])
	assert.Equal(t, []bool{true, true, true}, side[shadowID])
}

// TestShadowLanes: the mark is orthogonal to lanes. Consumers in base, "a"
// and "a.x" with a lane registry: shadow messages of a lane are routed to
// that lane's consumer in the shadow group, as production ones are in the
// production group, and each handler sees the lane and the mark.
func TestShadowLanes(t *testing.T) {
	const topic, group = "shl_orders", "shl_group"
	_, cfg := shadowEnv(t, group, topic)
	reg := lane.NewMemoryRegistry(lane.MemoryOptions{})
	t.Cleanup(func() { _ = reg.Close() })
	p := newTestProducer(t, producer.WithConfig(cfg))

	type run struct {
		consumer string
		lane     string
		shadow   bool
	}
	var (
		mu   sync.Mutex
		runs = map[string][]run{}
	)
	cs := map[string]*Consumer{}
	for _, ln := range []string{"", "a", "a.x"} {
		name := "base"
		if ln != "" {
			name = ln
		}
		cs[name] = newConsumer(t, group, topic, func(ctx context.Context, m *Message) error {
			l, _ := lane.FromContext(ctx)
			mu.Lock()
			defer mu.Unlock()
			runs[m.ID] = append(runs[m.ID], run{consumer: name, lane: l, shadow: lane.IsShadow(ctx)})
			return nil
		}, WithConfig(cfg), WithLane(ln), WithLaneRegistry(reg), WithForwardToken(testToken),
			WithInstanceName("shl-"+name))
	}
	// Every consumer, on both sides, sees the three lanes.
	require.Eventually(t, func() bool {
		for _, c := range cs {
			inner, _ := c.shadow.current()
			if inner == nil {
				return false
			}
			for _, x := range []*Consumer{c, inner} {
				snap := x.lanes.state.Load().snap
				if !snap.Live("") || !snap.Live("a") || !snap.Live("a.x") {
					return false
				}
			}
		}
		return true
	}, waitLong, 10*time.Millisecond, "lanes visible on both sides")

	want := map[string]string{"a.x": "a.x", "a.y": "a", "": "base"}
	type sent struct {
		lane   string
		shadow bool
	}
	ids := map[string]sent{}
	for msgLane := range want {
		for i := 0; i < 10; i++ {
			shadow := i%2 == 0
			ctx, cancel := context.WithTimeout(lane.WithLane(lane.WithShadow(context.Background(), shadow), msgLane), 20*time.Second)
			r, err := p.Send(ctx, &producer.Message{Topic: topic, Body: []byte("x")})
			cancel()
			require.NoError(t, err)
			ids[r.MessageID] = sent{msgLane, shadow}
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range ids {
			if len(runs[id]) == 0 {
				return false
			}
		}
		return true
	}, waitLong, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for id, s := range ids {
		for _, r := range runs[id] {
			assert.Equal(t, run{consumer: want[s.lane], lane: s.lane, shadow: s.shadow}, r, "message %s", id)
		}
	}
}

// TestShadowSideLeavesNothingBehind: a consumer whose shadow side was
// stopped by the kill switch and started again leaves no goroutine of its
// own (nor of its configuration watchers) once Close returned.
func TestShadowSideLeavesNothingBehind(t *testing.T) {
	const topic, group = "lk_orders", "lk_billing"
	_, cfg := shadowEnv(t, group, topic)
	in := make(chan config.Version, 1)
	in <- config.Version{Config: cfg, Revision: "on"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(ctx, group, topic, func(context.Context, *Message) error { return nil },
		WithSource(config.Chan(in)), WithInvisibleDuration(testInvisible), WithLongPolling(testPolling))
	require.NoError(t, err)
	running := func() bool { _, ok, _ := c.ShadowState(); return ok }
	require.Eventually(t, running, waitLong, 10*time.Millisecond)
	off := cfg.Clone()
	off.Shadow.Enabled = false
	in <- config.Version{Config: off, Revision: "off"}
	require.Eventually(t, func() bool { return !running() }, waitLong, 10*time.Millisecond)
	in <- config.Version{Config: cfg, Revision: "on-again"}
	require.Eventually(t, running, waitLong, 10*time.Millisecond)
	require.NoError(t, c.Close(ctx))

	owned := []string{"consumer.(*shadowSide)", "consumer.(*Consumer)", "consumer.(*clusterRunner)",
		"consumer.(*brokerLoop)", "consumer.(*tracker)", "config.(*Watcher)"}
	require.Eventually(t, func() bool {
		buf := make([]byte, 1<<22)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, f := range owned {
				if strings.Contains(g, f) {
					t.Logf("still running:\n%s", g)
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "goroutines of the consumer outlive Close")
}
