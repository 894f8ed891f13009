package producer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
)

// A send whose context ends while its message waits behind a request of
// the same target that hangs gets its outcome within a moment of the
// context's end, and its bytes leave batching.totalBatchMaxBytes at once;
// the message is not sent, and the request ahead of it is not disturbed.
// The outcome used to wait for the request ahead to end (here 30 s), with
// the bytes counted all along.
func TestEndedSendLeavesAtOnceBehindAHungRequest(t *testing.T) {
	cases := []struct {
		name     string
		batching bool
		group    string
		sync     bool
		// ctx returns the context of the waiting send and ends it, or
		// leaves it to end by itself.
		ctx     func() (ctx context.Context, end func())
		wantErr error
	}{
		{name: "batched, cancelled", batching: true, ctx: cancelled, wantErr: context.Canceled},
		{name: "batched, deadline", batching: true, ctx: deadline, wantErr: context.DeadlineExceeded},
		{name: "batched FIFO, cancelled", batching: true, group: "g", ctx: cancelled, wantErr: context.Canceled},
		{name: "FIFO line, cancelled", group: "g", ctx: cancelled, wantErr: context.Canceled},
		{name: "batched, synchronous", batching: true, sync: true, ctx: deadline, wantErr: context.DeadlineExceeded},
		{name: "FIFO line, synchronous", group: "g", sync: true, ctx: deadline, wantErr: context.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, broker := startSlow(t)
			doc := docFor(env, "slow")
			doc.Batching.Enabled = tc.batching
			doc.Timeouts.Request = config.Duration(30 * time.Second)
			doc.Timeouts.SendDeadline = config.Duration(30 * time.Second)
			p := newProducer(t, WithConfig(doc))
			ctx := testCtx(t)
			_, err := p.Send(ctx, &Message{Topic: "slow", Body: []byte("warm up"), MessageGroup: tc.group})
			require.NoError(t, err)

			broker.Pause()
			ahead := &Message{Topic: "slow", Body: []byte("ahead"), MessageGroup: tc.group}
			aheadDone := make(chan error, 1)
			p.SendAsync(ctx, ahead, func(_ *SendResult, err error) { aheadDone <- err })
			require.Eventually(t, func() bool { return p.acc.BufferedBytes() == int64(ahead.size()) },
				10*time.Second, time.Millisecond, "the message ahead is in flight")

			behind := &Message{Topic: "slow", Body: []byte("behind, with a longer body"), MessageGroup: tc.group}
			sctx, end := tc.ctx()
			var (
				outcomes atomic.Int32
				done     = make(chan error, 2)
				bytes    atomic.Int64
			)
			if tc.sync {
				go func() {
					_, err := p.Send(sctx, behind)
					bytes.Store(p.acc.BufferedBytes())
					outcomes.Add(1)
					done <- err
				}()
			} else {
				p.SendAsync(sctx, behind, func(_ *SendResult, err error) {
					bytes.Store(p.acc.BufferedBytes())
					outcomes.Add(1)
					done <- err
				})
			}
			require.Eventually(t, func() bool { return p.acc.BufferedBytes() == int64(ahead.size()+behind.size()) },
				10*time.Second, time.Millisecond, "the message behind waits")
			endAt, _ := sctx.Deadline()
			if end != nil {
				time.Sleep(20 * time.Millisecond)
				endAt = time.Now()
				end()
			}
			var got error
			select {
			case got = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("no outcome while the request ahead hangs")
			}
			waited := time.Since(endAt)
			require.ErrorIs(t, got, tc.wantErr)
			require.ErrorContains(t, got, "not sent")
			require.Less(t, waited, 2*time.Second, "the outcome came %v after the context could end", waited)
			require.EqualValues(t, ahead.size(), bytes.Load(), "the bytes of the message behind were back when its send ended")
			t.Logf("outcome %v after the context could end: %v", waited.Round(time.Millisecond), got)

			broker.Resume()
			select {
			case err := <-aheadDone:
				require.NoError(t, err, "the request ahead completes")
			case <-time.After(30 * time.Second):
				t.Fatal("the message ahead got no outcome")
			}
			require.NoError(t, p.Close(ctx))
			require.EqualValues(t, 1, outcomes.Load(), "one outcome for the message behind")
			require.Len(t, drain(t, env, "slow"), 2, "the warm-up and the message ahead are stored, not the one behind")
		})
	}
}

func cancelled() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	return ctx, cancel
}

func deadline() (context.Context, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	time.AfterFunc(time.Minute, cancel)
	return ctx, nil
}

// startSlow starts one broker with the topic "slow" of one queue, so that
// every message of it shares a target.
func startSlow(t *testing.T) (*embedded.Env, *embedded.Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(), MinLongPolling: 50 * time.Millisecond,
		Topics: []embedded.Topic{{Name: "slow", Queues: 1, Type: embedded.Mixed}},
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
