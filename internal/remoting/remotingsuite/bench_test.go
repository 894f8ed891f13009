package remotingsuite_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/remoting"
)

// Shape of the benchmark, the same as the gRPC wire benchmark's: 1 KiB
// bodies, 64 goroutines sharing one remoting client (one connection), one
// request per operation.
const (
	benchTopic   = "remoting_bench"
	benchCallers = 64
	benchBody    = 1 << 10
)

// BenchmarkRemotingSend measures the remoting send path, driver to embedded
// broker to store, one message per request (SEND_MESSAGE_V2) and batches
// of 32 (SEND_BATCH_MESSAGE). The figure is messages per second.
func BenchmarkRemotingSend(b *testing.B) {
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
	c := remoting.New()
	defer c.Close()
	ns, err := remoting.NewNameServer(c, []string{env.NameServer()})
	require.NoError(b, err)
	r, err := ns.Route(ctx, benchTopic)
	require.NoError(b, err)
	queues := r.WriteQueues()
	require.NotEmpty(b, queues)
	ids := remoting.NewIDGenerator()
	payload := make([]byte, benchBody)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	target := func(g int) remoting.SendTarget {
		q := queues[g%len(queues)]
		return remoting.SendTarget{Addr: q.Addr, BrokerName: q.BrokerName, QueueID: q.QueueID, ProducerGroup: "bench"}
	}
	send := func(g int) error {
		msgs := make([]*remoting.Message, batch)
		for i := range msgs {
			msgs[i] = &remoting.Message{Topic: benchTopic, Body: payload}
		}
		if batch == 1 {
			_, err := c.Send(ctx, ids, target(g), msgs[0])
			return err
		}
		_, err := c.SendBatch(ctx, ids, target(g), msgs)
		return err
	}
	require.NoError(b, send(0)) // connect outside the timing

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
			for next.Add(1) <= int64(b.N) {
				if err := send(g); err != nil {
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
	b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), fmt.Sprintf("fig:wire_remoting_send_%d_msgs_s", batch))
}
