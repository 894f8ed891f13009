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
//   - e2e_produce_msgs_s and e2e_consume_msgs_s: a producer (batched sends
//     from benchSenders goroutines to both clusters) and two consumers of
//     one group run at the same time, in the same process, on a topic that
//     starts empty, until 2 x benchMessages messages are produced and
//     handled (each acked right after its handler). The produce rate is the
//     messages divided by the time from the first send to the last send's
//     result; the consume rate is the messages divided by the time from the
//     first message handled to the last. Each side is timed over its own
//     span of the same messages, so the one-message latency at the start
//     and at the end of the stream counts on neither side: the consume rate
//     is at least the produce rate exactly when the consumers handled the
//     stream in no more time than it took to produce it, i.e. the backlog
//     did not grow over the run. The log line gives the backlog at the end
//     of production and the largest one seen: bounded (and unrelated to the
//     run's length) while consumption keeps up, growing with the run when
//     it does not.
//   - forward_p50_ms, forward_p99_ms: the duration of one forwarded delivery
//     (base consumer to the consumer of lane "a", the handler included) over
//     a stream of lane-tagged messages.
//
// Both sides share the machine's CPUs, so the rates are those of the whole
// pipeline run flat out, not of a producer or a consumer alone (for those
// see the producer's BenchmarkProduce and BenchmarkDrain here).
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

	const total = 2 * benchMessages
	var (
		sent, handled            atomic.Int64
		firstHandled, allHandled atomic.Int64 // unix ns
		allDone                  = make(chan struct{})
	)
	h := func(ctx context.Context, m *Message) error {
		now := time.Now().UnixNano()
		firstHandled.CompareAndSwap(0, now)
		if handled.Add(1) == total {
			allHandled.Store(now)
			close(allDone)
		}
		return nil
	}
	consumers := make([]*Consumer, 2)
	for i := range consumers {
		consumers[i] = newConsumer(b, group, topic, h, WithConfig(cfg), WithInstanceName(fmt.Sprintf("bench-%d", i)),
			WithInvisibleDuration(30*time.Second))
	}
	p, err := producer.New(ctx, producer.WithConfig(cfg))
	require.NoError(b, err)
	body := make([]byte, benchBody)

	// The backlog (produced, not yet handled) is sampled while both run.
	var maxBacklog atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
				if d := sent.Load() - handled.Load(); d > maxBacklog.Load() {
					maxBacklog.Store(d)
				}
			}
		}
	}()
	start := time.Now()
	produce(b, ctx, p, topic, total, body, nil, &sent)
	produceTime := time.Since(start)
	backlogAtEnd := sent.Load() - handled.Load()
	select {
	case <-allDone:
	case <-time.After(benchPhaseLimit):
		b.Fatalf("consumed %d of %d in %v after production ended", handled.Load(), total, benchPhaseLimit)
	}
	close(stopSampling)
	<-sampled
	consumeTime := time.Duration(allHandled.Load() - firstHandled.Load())
	produceRate := float64(total) / produceTime.Seconds()
	consumeRate := float64(total) / consumeTime.Seconds()
	b.Logf("%d messages: produced in %v, handled in %v (first to last), all handled %v after the first send; backlog at the end of production %d, largest seen %d",
		total, produceTime.Round(time.Millisecond), consumeTime.Round(time.Millisecond),
		time.Duration(allHandled.Load()-start.UnixNano()).Round(time.Millisecond), backlogAtEnd, maxBacklog.Load())
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
