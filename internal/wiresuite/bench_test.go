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

// Shape of the wire benchmark: 1 KiB bodies, 64 goroutines sharing one
// driver client (as the producer's senders do), one request per operation.
const (
	benchTopic   = "wire_bench"
	benchCallers = 64
	benchBody    = 1 << 10
)

// BenchmarkWireSend measures the whole send path over gRPC, driver to
// embedded broker to store, with one message per request and with batches
// of 32. One operation is one SendMessage call; the figure is messages per
// second.
func BenchmarkWireSend(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchSend(b, batch) })
	}
}

func benchSend(b *testing.B, batch int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1,
		Topics: []embedded.Topic{{Name: benchTopic, Queues: 8}},
	})
	require.NoError(b, err)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		require.NoError(b, env.Close(cctx))
	}()
	p, err := driver.New(driver.Config{Type: driver.Producer, Topics: []string{benchTopic}})
	require.NoError(b, err)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = p.Close(cctx)
	}()
	route, err := p.Route(ctx, env.Clusters()[0].Endpoints()[0], benchTopic)
	require.NoError(b, err)
	queues := route.WritableQueues()
	require.NotEmpty(b, queues)

	payload := make([]byte, benchBody)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	// Each caller reuses its messages: Send never modifies them, and ids are
	// generated per send because ID is left empty.
	batches := make([][]*driver.Message, benchCallers)
	for g := range batches {
		q := queues[g%len(queues)]
		batches[g] = make([]*driver.Message, batch)
		for i := range batches[g] {
			batches[g][i] = &driver.Message{Topic: benchTopic, QueueID: q.ID, Body: payload}
		}
	}
	// Warm up the connection and the Settings handshake outside the timing.
	_, err = p.Send(ctx, queues[0].Endpoint, batches[0])
	require.NoError(b, err)

	var (
		next     atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	b.SetBytes(int64(batch * benchBody))
	b.ResetTimer()
	start := time.Now()
	for g := range benchCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := queues[g%len(queues)]
			for next.Add(1) <= int64(b.N) {
				res, err := p.Send(ctx, q.Endpoint, batches[g])
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
							break
						}
					}
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if e := firstErr.Load(); e != nil {
		b.Fatalf("send failed: %v", *e)
	}
	b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), fmt.Sprintf("fig:wire_send_%d_msgs_s", batch))
}
