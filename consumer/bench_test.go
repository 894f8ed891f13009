package consumer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

// Sizes of the end-to-end benchmark: bounded in count, and every phase in
// time by benchPhaseLimit.
const (
	benchMessages   = 50000
	benchBody       = 256
	benchSenders    = 64
	benchForwarded  = 2000
	benchPhaseLimit = 2 * time.Minute
)

// BenchmarkE2E measures, in one run against the embedded brokers (two
// clusters of two brokers):
//
//   - e2e_produce_msgs_s: messages per second a producer stores (batched
//     sends from benchSenders goroutines to both clusters) while two
//     consumers of one group work off a backlog of the same topic, in the
//     same process;
//   - e2e_consume_msgs_s: messages per second those consumers receive and
//     handle (each acked right after) over the same window, which ends
//     when they caught up or production ended: above the produce rate
//     exactly when consumption keeps up with production;
//   - forward_p50_ms, forward_p99_ms: the duration of one forwarded delivery
//     (base consumer to the consumer of lane "a", the handler included) over
//     a stream of lane-tagged messages.
//
// Run it with -benchtime 1x (make bench-consume): the figures come from one
// run of fixed size, not from b.N.
func BenchmarkE2E(b *testing.B) {
	for i := 0; i < b.N; i++ {
		runE2E(b)
	}
}

func runE2E(b *testing.B) {
	const topic, group = "bench_e2e", "bench_group"
	const ftopic, fgroup = "bench_fwd", "bench_fwd_group"
	env := startEnvTopics(b, []string{topic, ftopic})
	cfg := docFor(env, topic, group, config.Consumer{Concurrency: 64})
	for i := range cfg.Topics[topic].Clusters {
		// Both clusters take traffic, as two data centres both serving.
		cfg.Topics[topic].Clusters[i].Priority = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*benchPhaseLimit)
	defer cancel()

	// The producer sends 2 x benchMessages as fast as it can. Once the
	// first half is stored, two consumers start on that backlog while the
	// second half is still being produced, so they run saturated next to
	// a saturated producer on the same machine. Over that window the
	// produce rate is what was stored, the consume rate what was handled.
	// The consumers keep up with production exactly when the consume rate
	// is the higher one: they worked off the backlog faster than it grew.
	p, err := producer.New(ctx, producer.WithConfig(cfg))
	require.NoError(b, err)
	body := make([]byte, benchBody)
	var sent, handled atomic.Int64
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		produce(b, ctx, p, topic, 2*benchMessages, body, nil, &sent)
	}()
	for sent.Load() < benchMessages {
		require.True(b, ctx.Err() == nil, "production stalled")
		time.Sleep(time.Millisecond)
	}
	h := func(ctx context.Context, m *Message) error {
		handled.Add(1)
		return nil
	}
	start := time.Now()
	sentAtStart := sent.Load()
	consumers := make([]*Consumer, 2)
	for i := range consumers {
		consumers[i] = newConsumer(b, group, topic, h, WithConfig(cfg), WithInstanceName(fmt.Sprintf("bench-%d", i)),
			WithInvisibleDuration(30*time.Second))
	}
	// The window ends when the consumers caught up with the producer (they
	// handled all that was stored) or when production ended, whichever
	// comes first: until then both sides ran flat out.
	var (
		window                  time.Duration
		sentInWindow, handledIn int64
		caughtUp                bool
	)
	limit := time.After(benchPhaseLimit)
	for window == 0 {
		select {
		case <-producing:
			window = time.Since(start)
		case <-limit:
			b.Fatalf("production did not finish in %v", benchPhaseLimit)
		case <-time.After(time.Millisecond):
			if handled.Load() >= sent.Load() {
				window, caughtUp = time.Since(start), true
			}
		}
	}
	sentInWindow, handledIn = sent.Load()-sentAtStart, handled.Load()
	produceRate := float64(sentInWindow) / window.Seconds()
	consumeRate := float64(handledIn) / window.Seconds()
	<-producing
	deadline := time.Now().Add(benchPhaseLimit)
	for handled.Load() < 2*benchMessages {
		require.True(b, time.Now().Before(deadline), "consumed %d of %d", handled.Load(), 2*benchMessages)
		time.Sleep(time.Millisecond)
	}
	b.Logf("window %v (caught up: %v): backlog at start %d, %d produced and %d consumed in it; all consumed %v after the start",
		window.Round(time.Millisecond), caughtUp, sentAtStart, sentInWindow, handledIn,
		time.Since(start).Round(time.Millisecond))
	for _, c := range consumers {
		require.NoError(b, c.Close(ctx))
	}
	require.NoError(b, p.Close(ctx))

	// Forwarding: a topic of its own with a base and an "a" consumer; the
	// messages of lane "a" that the base consumer receives are forwarded.
	fcfg := docFor(env, ftopic, fgroup, config.Consumer{Concurrency: 16})
	for i := range fcfg.Topics[ftopic].Clusters {
		fcfg.Topics[ftopic].Clusters[i].Priority = 0
	}
	fcfg.Topics[topic] = cfg.Topics[topic]
	reg := lane.NewMemoryRegistry(lane.MemoryOptions{})
	defer reg.Close()
	var (
		mu   sync.Mutex
		lats []time.Duration
	)
	fp, err := producer.New(ctx, producer.WithConfig(fcfg))
	require.NoError(b, err)
	var fhandled atomic.Int64
	fdone := make(chan struct{})
	fh := func(ctx context.Context, m *Message) error {
		if m.Lane == "a" && fhandled.Add(1) == benchForwarded {
			close(fdone)
		}
		return nil
	}
	for _, ln := range []string{"", "a"} {
		c := newConsumer(b, fgroup, ftopic, fh, WithConfig(fcfg), WithLane(ln), WithLaneRegistry(reg),
			WithForwardToken(testToken), WithInstanceName("bench-fwd-"+ln), WithInvisibleDuration(30*time.Second),
			func(o *options) {
				o.forwardObserver = func(d time.Duration) {
					mu.Lock()
					lats = append(lats, d)
					mu.Unlock()
				}
			})
		waitSelf(b, c)
	}
	// Paced, so the latency measured is that of forwarding, not of a queue
	// of forwards behind a burst.
	produce(b, lane.WithLane(ctx, "a"), fp, ftopic, benchForwarded, body, func() { time.Sleep(2 * time.Millisecond) }, nil)
	select {
	case <-fdone:
	case <-time.After(benchPhaseLimit):
		b.Fatalf("handled %d of %d lane messages in %v", fhandled.Load(), benchForwarded, benchPhaseLimit)
	}
	require.NoError(b, fp.Close(ctx))

	mu.Lock()
	slices.Sort(lats)
	n := len(lats)
	mu.Unlock()
	require.Positive(b, n, "no message was forwarded")
	pct := func(q float64) float64 { return float64(lats[min(n-1, int(q*float64(n)))]) / float64(time.Millisecond) }
	b.ReportMetric(produceRate, "fig:e2e_produce_msgs_s")
	b.ReportMetric(consumeRate, "fig:e2e_consume_msgs_s")
	b.ReportMetric(pct(0.50), "fig:forward_p50_ms")
	b.ReportMetric(pct(0.99), "fig:forward_p99_ms")
	b.Logf("produced at %.0f msg/s, consumed at %.0f msg/s; %d forwards: p50 %.3f ms, p99 %.3f ms",
		produceRate, consumeRate, n, pct(0.5), pct(0.99))
}

// produce sends n messages from benchSenders goroutines and waits for all
// results; pace, when set, runs between two sends of one goroutine.
func produce(b *testing.B, ctx context.Context, p *producer.Producer, topic string, n int, body []byte, pace func(), sent *atomic.Int64) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs atomic.Int64
	)
	for range benchSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := p.Send(ctx, &producer.Message{Topic: topic, Body: body}); err != nil {
					errs.Add(1)
				} else if sent != nil {
					sent.Add(1)
				}
				if pace != nil {
					pace()
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(b, errs.Load(), "sends failed")
}

// waitSelf waits until the consumer sees its own registration.
func waitSelf(b *testing.B, c *Consumer) {
	deadline := time.Now().Add(waitLong)
	for !c.lanes.state.Load().snap.Live(c.Lane()) {
		require.True(b, time.Now().Before(deadline), "registration never visible")
		time.Sleep(5 * time.Millisecond)
	}
}
