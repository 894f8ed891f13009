package producer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// With batching off, a FIFO group has one request in flight, so the order
// of the send calls of a group is the stored order (doc.go), whether they
// are Send or SendAsync. A synchronous Send used to go straight to the
// broker, past the line where an earlier SendAsync of its group waited,
// and was usually stored first.
func TestFIFOWithoutBatchingSendQueuesBehindSendAsync(t *testing.T) {
	env := startEnv(t, "fifo")
	doc := docFor(env, "fifo")
	doc.Batching.Enabled = false
	p := newProducer(t, WithConfig(doc))
	ctx := testCtx(t)
	_, err := p.Send(ctx, &Message{Topic: "fifo", Body: []byte("warm up"), MessageGroup: "g"})
	require.NoError(t, err)

	const rounds = 50
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		async = make([]*SendResult, rounds)
		sync_ = make([]*SendResult, rounds)
	)
	for i := range rounds {
		wg.Add(1)
		p.SendAsync(ctx, &Message{Topic: "fifo", Body: []byte(fmt.Sprint("a", i)), MessageGroup: "g"}, func(r *SendResult, err error) {
			defer wg.Done()
			require.NoError(t, err)
			mu.Lock()
			async[i] = r
			mu.Unlock()
		})
		r, err := p.Send(ctx, &Message{Topic: "fifo", Body: []byte(fmt.Sprint("s", i)), MessageGroup: "g"})
		require.NoError(t, err)
		sync_[i] = r
	}
	wg.Wait()
	overtaken := 0
	for i := range rounds {
		require.Equal(t, async[i].Endpoint, sync_[i].Endpoint)
		require.Equal(t, async[i].QueueID, sync_[i].QueueID)
		if sync_[i].Offset < async[i].Offset {
			overtaken++
		}
	}
	require.Zero(t, overtaken, "%d of %d synchronous sends were stored before the asynchronous send of the same group issued just before them", overtaken, rounds)
}

// A message waiting for buffer space when a reload lowers
// batching.totalBatchMaxBytes below its size fails with ErrBodyTooLarge,
// as a message of that size sent after the reload does (it used to get
// the batch package's ErrTooLarge, which wraps no producer sentinel).
func TestCapLoweredUnderAWaiterIsErrBodyTooLarge(t *testing.T) {
	env, broker := startOne(t, "shrink")
	doc := func(capBytes int64) *config.Config {
		d := docFor(env, "shrink")
		d.Batching.BatchMaxBytes = 64 << 10
		d.Batching.TotalBatchMaxBytes = capBytes
		d.Timeouts.Request = config.Duration(30 * time.Second)
		d.Timeouts.SendDeadline = config.Duration(30 * time.Second)
		return d
	}
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: doc(256 << 10), Revision: "1"}
	p := newProducer(t, WithSource(config.Chan(versions)))
	ctx := testCtx(t)
	_, err := p.Send(ctx, &Message{Topic: "shrink", Body: []byte("warm up")})
	require.NoError(t, err)

	broker.Pause()
	defer broker.Resume()
	// 192 KiB in flight (delayed messages go alone, each reserving its bytes).
	for range 3 {
		p.SendAsync(ctx, &Message{Topic: "shrink", Body: make([]byte, 64<<10-200), DeliveryTime: time.Now().Add(time.Minute)}, func(*SendResult, error) {})
	}
	require.Eventually(t, func() bool { return p.acc.BufferedBytes() >= 3*(64<<10-200) }, 5*time.Second, 10*time.Millisecond)
	errc := make(chan error, 1)
	go func() {
		_, err := p.Send(ctx, &Message{Topic: "shrink", Body: make([]byte, 100<<10), DeliveryTime: time.Now().Add(time.Minute)})
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond) // the 100 KiB send waits for room
	versions <- config.Version{Config: doc(64 << 10), Revision: "2"}
	select {
	case err := <-errc:
		require.Error(t, err)
		require.ErrorIs(t, err, ErrBodyTooLarge, "got %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting send got no outcome")
	}
}

// Close that gives up fails the sends still in progress with ErrClosed,
// a SendAsync that went on in the background because its topic has no
// route yet included. It used to keep waiting for a route, with the
// producer closed, until its own deadline, and then fail with ErrNoTarget.
func TestCloseCutsSendWaitingForRoute(t *testing.T) {
	cfg := noRouteConfig()
	p, err := New(testCtx(t), WithConfig(cfg))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	p.SendAsync(ctx, &Message{Topic: "nowhere", Body: []byte("x")}, func(_ *SendResult, err error) { done <- err })
	time.Sleep(300 * time.Millisecond)

	closeCtx, cancelClose := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelClose()
	require.ErrorIs(t, p.Close(closeCtx), context.DeadlineExceeded)
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(3 * time.Second):
		t.Fatal("3 s after Close gave up, the send still waits for a route on a closed producer")
	}
}

// totalBatchMaxBytes bounds what SendAsync lets pile up, also while no
// route is known. SendAsync used to hand every such message to a
// background goroutine without reserving its bytes, so the producer held
// any number of them (each with a goroutine) until routes came or their
// deadlines passed.
func TestSendAsyncWithoutRouteHonoursTheCap(t *testing.T) {
	const capBytes, size, total = 128 << 10, 16 << 10, 64
	cfg := noRouteConfig()
	cfg.Batching.BatchMaxBytes = capBytes
	cfg.Batching.TotalBatchMaxBytes = capBytes
	p := newProducer(t, WithConfig(cfg))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var accepted atomic.Int64
	var outcomes sync.WaitGroup
	outcomes.Add(total)
	go func() {
		for range total {
			p.SendAsync(ctx, &Message{Topic: "nowhere", Body: make([]byte, size)}, func(*SendResult, error) { outcomes.Done() })
			accepted.Add(1)
		}
	}()
	time.Sleep(time.Second)
	n := accepted.Load()
	outcomes.Wait()
	require.LessOrEqual(t, n, int64(capBytes/size),
		"SendAsync accepted %d messages of %d bytes (%d KiB) with a cap of %d KiB and no route", n, size, n*size>>10, capBytes>>10)
}
