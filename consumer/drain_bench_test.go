package consumer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
)

// BenchmarkDrain measures the consume side alone, beside BenchmarkE2E's
// concurrent figure (which the produce rate caps): 2 x benchMessages
// messages of benchBody bytes, as in BenchmarkE2E, are stored first on the
// brokers of both embedded clusters (not timed), then two consumers of one
// group, with a handler that only counts, receive, handle and ack them. No
// producer competes for the CPU, so this is the ceiling the consumer
// reaches on this machine.
//
// The figure drain_consume_msgs_s is the messages divided by the time from
// the first message handled to the last: the consumers' start (connections,
// routes, the first long poll) is left out, as it is on BenchmarkE2E's
// consume side, and logged.
//
// Run it with -benchtime 1x (make bench-consume): the figure comes from one
// run of fixed size, not from b.N.
func BenchmarkDrain(b *testing.B) {
	for i := 0; i < b.N; i++ {
		runDrain(b)
	}
}

func runDrain(b *testing.B) {
	const topic, group = "bench_drain", "bench_drain_group"
	const total = 2 * benchMessages
	env := startEnvTopics(b, []string{topic})
	cfg := docFor(env, topic, group, config.Consumer{Concurrency: 64})
	for i := range cfg.Topics[topic].Clusters {
		cfg.Topics[topic].Clusters[i].Priority = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchPhaseLimit)
	defer cancel()
	fillDrain(b, ctx, env.Clusters()[0].Endpoints(), env.Clusters()[1].Endpoints(), topic, total)

	var (
		handled                  atomic.Int64
		firstHandled, allHandled atomic.Int64 // unix ns
		done                     = make(chan struct{})
	)
	h := func(ctx context.Context, m *Message) error {
		now := time.Now().UnixNano()
		firstHandled.CompareAndSwap(0, now)
		if handled.Add(1) == total {
			allHandled.Store(now)
			close(done)
		}
		return nil
	}
	start := time.Now()
	consumers := make([]*Consumer, 2)
	for i := range consumers {
		consumers[i] = newConsumer(b, group, topic, h, WithConfig(cfg), WithInstanceName(fmt.Sprintf("drain-%d", i)),
			WithInvisibleDuration(30*time.Second))
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("handled %d of %d in %v", handled.Load(), total, benchPhaseLimit)
	}
	for _, c := range consumers {
		require.NoError(b, c.Close(ctx))
	}
	elapsed := time.Duration(allHandled.Load() - firstHandled.Load())
	rate := float64(total) / elapsed.Seconds()
	b.ReportMetric(rate, "fig:drain_consume_msgs_s")
	b.Logf("%d stored messages handled in %v (first to last), the first %v after the consumers started: %.0f msg/s",
		total, elapsed.Round(time.Millisecond), time.Duration(firstHandled.Load()-start.UnixNano()).Round(time.Millisecond), rate)
}

// fillDrain stores n messages of benchBody bytes, spread evenly over the
// brokers of both clusters, in batches of 32.
func fillDrain(b *testing.B, ctx context.Context, a, c []string, topic string, n int) {
	b.Helper()
	p, err := driver.New(driver.Config{Type: driver.Producer, Topics: []string{topic}})
	require.NoError(b, err)
	defer func() { _ = p.Close(context.Background()) }()
	eps := append(append([]string(nil), a...), c...)
	body := make([]byte, benchBody)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs atomic.Int64
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep := eps[g%len(eps)]
			for {
				from := next.Add(32) - 32
				if from >= int64(n) {
					return
				}
				batch := make([]*driver.Message, min(32, int64(n)-from))
				for i := range batch {
					batch[i] = &driver.Message{Topic: topic, QueueID: driver.AnyQueue, Body: body}
				}
				res, err := p.Send(ctx, ep, batch)
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
						}
					}
				}
				if err != nil {
					errs.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(b, errs.Load(), "fill failed")
}
