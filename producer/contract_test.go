package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/lane"
)

// Promises of the package doc at their edges: the cap, FIFO order without
// batching, contexts, Close and routes that are not there yet.

// startOne starts one cluster of one broker with topic, for tests that
// pause the only broker.
func startOne(t *testing.T, topic string) (*embedded.Env, *embedded.Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(),
		Topics: []embedded.Topic{{Name: topic, Type: embedded.Mixed}},
	})
	require.NoError(t, err)
	broker := env.Clusters()[0].Brokers()[0]
	t.Cleanup(func() {
		broker.Resume()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.Close(ctx)
	})
	return env, broker
}

// The lane property counts in a message's size: a message that fits the
// cap only without it gets ErrBodyTooLarge before anything is sent.
func TestLanePropertyCountsAgainstTheCap(t *testing.T) {
	env := startEnv(t, "capped")
	doc := docFor(env, "capped")
	doc.Batching.BatchMaxBytes = 64 << 10
	doc.Batching.TotalBatchMaxBytes = 64 << 10
	p := newProducer(t, WithConfig(doc))
	body := make([]byte, 64<<10)
	_, err := p.Send(lane.WithLane(testCtx(t), "gray"), &Message{Topic: "capped", Body: body})
	require.ErrorIs(t, err, ErrBodyTooLarge)
	_, err = p.Send(testCtx(t), &Message{Topic: "capped", Body: body})
	require.NoError(t, err, "without a lane the same body fits")
}

// SendAsync does not wait for routes on the caller's goroutine.
func TestSendAsyncDoesNotWaitForRoutes(t *testing.T) {
	cfg := noRouteConfig()
	p := newProducer(t, WithConfig(cfg))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	p.SendAsync(ctx, &Message{Topic: "nowhere", Body: []byte("x")}, func(_ *SendResult, err error) { done <- err })
	require.Less(t, time.Since(start), 500*time.Millisecond, "SendAsync waited for a route on its caller's goroutine")
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrNoTarget)
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome")
	}
}

// With batching off, the messages of a FIFO group are stored in the order
// of the batch, each alone.
func TestFIFOOrderWithoutBatching(t *testing.T) {
	env := startEnv(t, "fifo")
	doc := docFor(env, "fifo")
	doc.Batching.Enabled = false
	p := newProducer(t, WithConfig(doc))

	const n = 200
	msgs := make([]*Message, n)
	for i := range msgs {
		msgs[i] = &Message{Topic: "fifo", Body: []byte(fmt.Sprint(i)), MessageGroup: "g1"}
	}
	res, err := p.SendBatch(testCtx(t), msgs)
	require.NoError(t, err)
	for i := 1; i < n; i++ {
		require.Equal(t, res[0].Endpoint, res[i].Endpoint)
		require.Equal(t, res[0].QueueID, res[i].QueueID)
		require.Greater(t, res[i].Offset, res[i-1].Offset, "message %d stored before message %d", i, i-1)
	}
}

// A lone synchronous Send whose batch runs in place returns when its
// context ends, not after timeouts.request.
func TestLoneSendHonoursItsContext(t *testing.T) {
	env, broker := startOne(t, "hung")
	doc := docFor(env, "hung")
	doc.Timeouts.Request = config.Duration(3 * time.Second)
	p := newProducer(t, WithConfig(doc))
	_, err := p.Send(testCtx(t), &Message{Topic: "hung", Body: []byte("warm up")})
	require.NoError(t, err)

	broker.Pause()
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = p.Send(ctx, &Message{Topic: "hung", Body: []byte("x")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), time.Second, "Send outlived its context")
}

// Sends that Close gives up on fail with ErrClosed.
func TestSendsCutByCloseAreErrClosed(t *testing.T) {
	env, broker := startOne(t, "cut")
	doc := docFor(env, "cut")
	doc.Timeouts.Request = config.Duration(30 * time.Second)
	doc.Timeouts.SendDeadline = config.Duration(30 * time.Second)
	p, err := New(testCtx(t), WithConfig(doc))
	require.NoError(t, err)
	_, err = p.Send(testCtx(t), &Message{Topic: "cut", Body: []byte("warm up")})
	require.NoError(t, err)

	broker.Pause()
	const n = 10
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	wg.Add(n)
	for range n {
		p.SendAsync(testCtx(t), &Message{Topic: "cut", Body: []byte("stuck")}, func(_ *SendResult, err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			wg.Done()
		})
	}
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, p.Close(ctx), context.DeadlineExceeded)
	wg.Wait()
	for _, err := range errs {
		require.True(t, errors.Is(err, ErrClosed), "a send cut by Close: %v", err)
	}
}

// Messages that go alone (delayed ones here) count against
// batching.totalBatchMaxBytes while in flight: with the broker hung,
// SendAsync stops accepting them at the cap, and once the broker is back
// every one of them is stored.
func TestAloneMessagesCountAgainstTheCap(t *testing.T) {
	env, broker := startOne(t, "later")
	const capBytes, size, total = 128 << 10, 16 << 10, 40
	doc := docFor(env, "later")
	doc.Batching.BatchMaxBytes = capBytes
	doc.Batching.TotalBatchMaxBytes = capBytes
	doc.Timeouts.Request = config.Duration(30 * time.Second)
	doc.Timeouts.SendDeadline = config.Duration(30 * time.Second)
	p := newProducer(t, WithConfig(doc))
	_, err := p.Send(testCtx(t), &Message{Topic: "later", Body: []byte("warm up")})
	require.NoError(t, err)

	broker.Pause()
	var (
		accepted atomic.Int64
		failed   atomic.Int64
		outcomes sync.WaitGroup
	)
	outcomes.Add(total)
	go func() {
		for range total {
			m := &Message{Topic: "later", Body: make([]byte, size), DeliveryTime: time.Now().Add(time.Minute)}
			p.SendAsync(testCtx(t), m, func(_ *SendResult, err error) {
				if err != nil {
					failed.Add(1)
				}
				outcomes.Done()
			})
			accepted.Add(1)
		}
	}()
	time.Sleep(time.Second)
	// Each message is its body plus a little: at most capBytes/size fit.
	require.LessOrEqual(t, accepted.Load(), int64(capBytes/size), "accepted beyond the cap")
	require.LessOrEqual(t, p.acc.BufferedBytes(), int64(capBytes))
	broker.Resume()
	outcomes.Wait()
	require.Zero(t, failed.Load())
	require.EqualValues(t, total, accepted.Load())
}

// A send that finds no route says why: the clusters' last route errors.
func TestNoRouteErrorSaysWhy(t *testing.T) {
	env := startEnv(t, "real")
	doc := docFor(env, "typo")
	p := newProducer(t, WithConfig(doc))
	ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
	defer cancel()
	_, err := p.Send(ctx, &Message{Topic: "typo", Body: []byte("x")})
	require.ErrorIs(t, err, ErrNoTarget)
	for _, c := range env.Clusters() {
		require.Contains(t, err.Error(), c.Name+": route of topic \"typo\"")
	}
}
