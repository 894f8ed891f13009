package producer

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
)

// Deadlines within one grain share a channel, and it closes at or after
// every deadline it stands for, never before.
func TestSharedDeadlines(t *testing.T) {
	var ds deadlines
	at := func(d time.Time, key uint64) <-chan struct{} {
		s, shard := ds.at(d, key)
		return s.done[shard]
	}
	base := time.Now().Add(50 * time.Millisecond).Truncate(deadlineGrain)
	a := at(base.Add(time.Millisecond), 3)
	b := at(base.Add(deadlineGrain-time.Nanosecond), 3)
	require.Equal(t, a, b, "one grain and key, one channel")
	require.NotEqual(t, a, at(base.Add(time.Millisecond), 4), "keys spread over channels")
	c := at(base.Add(deadlineGrain+time.Millisecond), 3)
	require.NotEqual(t, a, c)
	require.Equal(t, a, at(base.Add(2*time.Millisecond), 3+deadlineShards), "the previous grain is still served")

	<-a
	require.False(t, time.Now().Before(base.Add(deadlineGrain-time.Nanosecond)), "closed before a deadline it stands for")
	<-c
	require.False(t, time.Now().Before(base.Add(deadlineGrain+time.Millisecond)))
}

// context.AfterFunc on a send's shared deadline runs at the deadline
// through the slot's hooks (no goroutine waits for it), not at all when
// stopped first, and at once when the deadline has passed; contexts derived
// from it end with it.
func TestSharedDeadlineAfterFunc(t *testing.T) {
	p := &Producer{}
	newCtx := func(d time.Duration) context.Context {
		pd := &pending{start: time.Now()}
		ctx, _ := p.sendContext(context.Background(), pd, d)
		_, ok := ctx.(*sendCtx)
		require.True(t, ok)
		return ctx
	}
	ctx := newCtx(50 * time.Millisecond)
	goroutines := runtime.NumGoroutine()
	fired := make(chan struct{})
	context.AfterFunc(ctx, func() { close(fired) })
	stopped := context.AfterFunc(ctx, func() { t.Error("a stopped function ran") })
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	require.LessOrEqual(t, runtime.NumGoroutine(), goroutines, "nothing waits on a goroutine")
	require.True(t, stopped())
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the function did not run at the deadline")
	}
	<-derived.Done()
	require.ErrorIs(t, derived.Err(), context.DeadlineExceeded)
	require.False(t, stopped(), "stopped twice")

	late := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(late) })
	<-late
	require.False(t, stop())
}

// A Send whose context has no deadline retries until timeouts.sendDeadline
// and then fails, batched or not, when the only broker hangs; a context that
// can be cancelled still stops it.
func TestSendDeadlineWithoutContextDeadline(t *testing.T) {
	ctx := context.Background()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(),
		Topics: []embedded.Topic{{Name: "dl", Queues: 2}},
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()
	broker := env.Clusters()[0].Brokers()[0]

	for _, batching := range []bool{true, false} {
		doc := docFor(env, "dl")
		doc.Batching.Enabled = batching
		doc.Timeouts.Request = config.Duration(250 * time.Millisecond)
		doc.Timeouts.SendDeadline = config.Duration(700 * time.Millisecond)
		p := newProducer(t, WithConfig(doc))
		_, err := p.Send(ctx, &Message{Topic: "dl", Body: []byte("warm")})
		require.NoError(t, err)

		broker.Pause()
		start := time.Now()
		_, err = p.Send(ctx, &Message{Topic: "dl", Body: []byte("stuck")})
		elapsed := time.Since(start)
		require.Error(t, err, "batching=%t", batching)
		require.GreaterOrEqual(t, elapsed, 700*time.Millisecond, "batching=%t: retried until the deadline", batching)
		require.Less(t, elapsed, 3*time.Second, "batching=%t: bounded by sendDeadline", batching)

		// A batch flushed in place runs its request to the end (the request
		// timeout); an unbatched one stops with the context.
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		start = time.Now()
		_, err = p.Send(cctx, &Message{Topic: "dl", Body: []byte("cancelled")})
		require.Error(t, err)
		require.Less(t, time.Since(start), 700*time.Millisecond, "batching=%t: a cancelled send does not retry", batching)
		if !batching {
			require.True(t, errors.Is(err, context.Canceled), "%v", err)
		}
		broker.Resume()
	}
}
