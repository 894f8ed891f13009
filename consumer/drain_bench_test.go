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

// BenchmarkDrain measures the consume side alone: b.N messages of 1 KiB are
// stored first on the brokers of both embedded clusters (not timed), then
// two consumers of one group with a handler that only counts receive,
// handle and ack them. One operation is one message handled; the figure is
// messages per second from the consumers' start to the last message
// handled. No producer competes for the CPU, so this is the ceiling the
// consumer reaches on this machine.
func BenchmarkDrain(b *testing.B) {
	const topic, group = "bench_drain", "bench_drain_group"
	env := startEnvTopics(b, []string{topic})
	cfg := docFor(env, topic, group, config.Consumer{Concurrency: 64})
	for i := range cfg.Topics[topic].Clusters {
		cfg.Topics[topic].Clusters[i].Priority = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchPhaseLimit)
	defer cancel()
	fillDrain(b, ctx, env.Clusters()[0].Endpoints(), env.Clusters()[1].Endpoints(), topic, b.N)

	var handled atomic.Int64
	done := make(chan struct{})
	h := func(ctx context.Context, m *Message) error {
		if handled.Add(1) == int64(b.N) {
			close(done)
		}
		return nil
	}
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	for i := range 2 {
		newConsumer(b, group, topic, h, WithConfig(cfg), WithInstanceName(fmt.Sprintf("drain-%d", i)),
			WithInvisibleDuration(30*time.Second))
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("handled %d of %d in %v", handled.Load(), b.N, benchPhaseLimit)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// fillDrain stores n messages of 1 KiB, spread evenly over the brokers of
// both clusters, in batches of 32.
func fillDrain(b *testing.B, ctx context.Context, a, c []string, topic string, n int) {
	b.Helper()
	p, err := driver.New(driver.Config{Type: driver.Producer, Topics: []string{topic}})
	require.NoError(b, err)
	defer func() { _ = p.Close(context.Background()) }()
	eps := append(append([]string(nil), a...), c...)
	body := make([]byte, 1024)
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
