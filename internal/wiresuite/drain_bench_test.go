package wiresuite_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
)

// BenchmarkWireDrain measures the consume path alone over gRPC, driver to
// embedded broker: b.N messages of 1 KiB are stored first (not timed), then
// pollers concurrent loops of ReceiveMessage (batch 32) followed by one
// AckMessage of what came drain them. One operation is one message received
// and acked; the figure is messages per second. Nothing but the driver runs
// on the client side, so the figure bounds what a consumer can reach.
func BenchmarkWireDrain(b *testing.B) {
	for _, pollers := range []int{1, 4} {
		b.Run(fmt.Sprintf("pollers=%d", pollers), func(b *testing.B) { benchDrain(b, pollers) })
	}
}

func benchDrain(b *testing.B, pollers int) {
	const group = "wire_bench_group"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1,
		Topics:         []embedded.Topic{{Name: benchTopic, Queues: 8}},
		MinLongPolling: embeddedMinLongPolling,
	})
	require.NoError(b, err)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		require.NoError(b, env.Close(cctx))
	}()
	endpoint := env.Clusters()[0].Endpoints()[0]
	fill(b, ctx, endpoint, b.N)

	c, err := driver.New(driver.Config{Type: driver.SimpleConsumer, Group: group,
		Subscriptions: []driver.Subscription{{Topic: benchTopic}}})
	require.NoError(b, err)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = c.Close(cctx)
	}()
	route, err := c.Route(ctx, endpoint, benchTopic)
	require.NoError(b, err)
	queue := route.ReadableQueues()[0]
	require.NoError(b, c.Connect(ctx, endpoint))

	var (
		got      atomic.Int64
		end      atomic.Int64 // unix ns when the last message was acked
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	// Once everything is acked the pollers still waiting are called off, so
	// their empty long polls do not count in the time.
	drainCtx, drained := context.WithCancel(ctx)
	defer drained()
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	b.SetBytes(benchBody)
	b.ResetTimer()
	start := time.Now()
	for range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			entries := make([]driver.AckEntry, 0, 32)
			for got.Load() < int64(b.N) && firstErr.Load() == nil {
				msgs, err := c.Receive(drainCtx, driver.ReceiveRequest{Queue: queue, BatchSize: 32,
					InvisibleDuration: time.Minute, LongPollingTimeout: embeddedMinLongPolling})
				if drainCtx.Err() != nil && ctx.Err() == nil {
					return
				}
				if err != nil {
					fail(err)
					return
				}
				if len(msgs) == 0 {
					continue
				}
				entries = entries[:0]
				for _, m := range msgs {
					if m.Err != nil {
						fail(m.Err)
						return
					}
					entries = append(entries, driver.AckEntry{MessageID: m.ID, ReceiptHandle: m.ReceiptHandle})
				}
				errs, err := c.Ack(ctx, queue.Endpoint, benchTopic, entries)
				if err == nil {
					for _, e := range errs {
						if e != nil {
							err = e
							break
						}
					}
				}
				if err != nil {
					fail(err)
					return
				}
				if got.Add(int64(len(msgs))) == int64(b.N) {
					end.Store(time.Now().UnixNano())
					drained()
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	elapsed := time.Duration(end.Load() - start.UnixNano())
	if e := firstErr.Load(); e != nil {
		b.Fatalf("drain failed: %v", *e)
	}
	require.Equal(b, int64(b.N), got.Load(), "every stored message drained exactly once")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// fill stores n messages of benchBody bytes on the broker at endpoint, in
// batches of 32 spread over the topic's queues.
func fill(b *testing.B, ctx context.Context, endpoint string, n int) {
	b.Helper()
	p, err := driver.New(driver.Config{Type: driver.Producer, Topics: []string{benchTopic}})
	require.NoError(b, err)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = p.Close(cctx)
	}()
	route, err := p.Route(ctx, endpoint, benchTopic)
	require.NoError(b, err)
	queues := route.WritableQueues()
	payload := make([]byte, benchBody)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := queues[g%len(queues)]
			for {
				from := next.Add(32) - 32
				if from >= int64(n) {
					return
				}
				batch := make([]*driver.Message, min(32, int64(n)-from))
				for i := range batch {
					batch[i] = &driver.Message{Topic: benchTopic, QueueID: q.ID, Body: payload}
				}
				res, err := p.Send(ctx, q.Endpoint, batch)
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
						}
					}
				}
				if err != nil {
					b.Errorf("fill: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
