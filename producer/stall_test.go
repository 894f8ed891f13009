package producer

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
)

// With totalBatchMaxBytes at 8 MiB and the only broker paused, senders
// block instead of buffering without bound: the heap stays under about
// twice the cap. When the broker resumes, every message is stored.
func TestStalledBrokerBoundsMemory(t *testing.T) {
	const (
		capBytes = 8 << 20
		msgSize  = 16 << 10
		total    = 2000 // 31 MiB offered, about four times the cap
		senders  = 8
	)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(), MinLongPolling: 50 * time.Millisecond,
		Topics: []embedded.Topic{{Name: "stall", Queues: 4}},
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()
	broker := env.Clusters()[0].Brokers()[0]

	doc := docFor(env, "stall")
	doc.Batching.TotalBatchMaxBytes = capBytes
	// The pause must not look like a dead broker: no request times out.
	doc.Timeouts.Request = config.Duration(60 * time.Second)
	doc.Timeouts.SendDeadline = config.Duration(100 * time.Second)
	p := newProducer(t, WithConfig(doc))
	_, err = p.Send(ctx, &Message{Topic: "stall", Body: []byte("warm up")})
	require.NoError(t, err)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapInuse

	broker.Pause()
	var (
		next, done, failed atomic.Int64
		wg                 sync.WaitGroup
		all                sync.WaitGroup
	)
	all.Add(total)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= total {
				// A fresh body per message, as an application builds it:
				// only backpressure keeps these from piling up.
				body := make([]byte, msgSize)
				p.SendAsync(ctx, &Message{Topic: "stall", Body: body}, func(_ *SendResult, err error) {
					if err != nil {
						failed.Add(1)
						t.Errorf("send: %v", err)
					}
					done.Add(1)
					all.Done()
				})
			}
		}()
	}

	// While paused: the buffer fills to the cap and the senders block.
	require.Eventually(t, func() bool { return p.acc.BufferedBytes() > capBytes-2*msgSize }, 30*time.Second, 10*time.Millisecond)
	var peak uint64
	for range 10 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse-min(baseline, ms.HeapInuse))
		require.LessOrEqual(t, p.acc.BufferedBytes(), int64(capBytes))
		time.Sleep(100 * time.Millisecond)
	}
	require.Zero(t, done.Load(), "nothing completes while the broker is paused")
	require.Less(t, next.Load(), int64(total), "senders are blocked, not done")
	t.Logf("heap in use above baseline while stalled: %.1f MiB (cap %d MiB)", float64(peak)/(1<<20), capBytes>>20)
	require.Less(t, peak, uint64(2*capBytes), "heap in use while stalled")

	broker.Resume()
	wg.Wait()
	all.Wait()
	require.Zero(t, failed.Load())
	stored := drain(t, env, "stall")
	require.Len(t, stored, total+1, "every message is stored once (plus the warm-up)")
}

// Close bounded by a ctx that ends while a broker hangs: Close returns the
// ctx's error, and every send still gets its outcome (an error), so no
// caller waits forever.
func TestCloseGivesUpOnAHungBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(),
		Topics: []embedded.Topic{{Name: "hung"}},
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()
	broker := env.Clusters()[0].Brokers()[0]
	defer broker.Resume()

	doc := docFor(env, "hung")
	doc.Timeouts.Request = config.Duration(30 * time.Second)
	doc.Timeouts.SendDeadline = config.Duration(30 * time.Second)
	p, err := New(ctx, WithConfig(doc))
	require.NoError(t, err)
	_, err = p.Send(ctx, &Message{Topic: "hung", Body: []byte("warm up")})
	require.NoError(t, err)

	broker.Pause()
	const n = 20
	var outcomes sync.WaitGroup
	var failed atomic.Int64
	outcomes.Add(n)
	for range n {
		p.SendAsync(ctx, &Message{Topic: "hung", Body: []byte("stuck")}, func(_ *SendResult, err error) {
			if err != nil {
				failed.Add(1)
			}
			outcomes.Done()
		})
	}
	closeCtx, cancelClose := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelClose()
	err = p.Close(closeCtx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	outcomes.Wait()
	require.Equal(t, int64(n), failed.Load())
}
