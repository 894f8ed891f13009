package batch

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An item whose context ends while it waits behind a flush of its key that
// does not end leaves the buffer at once: the callback of AddAsync comes
// (and a synchronous Add returns) while the flush still hangs, and the
// item's bytes are given back at once. It used to wait for the flush ahead
// of it, which with a hung broker lasts a request timeout or more.
func TestEndedItemLeavesTheBufferAtOnce(t *testing.T) {
	a, rec := gatedAcc(t, Config{})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 10)
	recv(t, rec.started) // the key is busy until the gate opens

	asyncCtx, cancelAsync := context.WithCancel(ctx)
	dropped := asyncAdd(t, a, asyncCtx, "k", 1, 100)
	kept := asyncAdd(t, a, ctx, "k", 2, 1000)
	syncCtx, cancelSync := context.WithCancel(ctx)
	syncErr := make(chan error, 1)
	go func() {
		_, err := a.Add(syncCtx, "k", 3, 10000)
		syncErr <- err
	}()
	waitUntil(t, func() bool { return pendingLen(a, "k") == 3 }, "three items buffered")
	require.EqualValues(t, 11110, a.BufferedBytes())

	cancelAsync()
	out := recv(t, dropped) // before the gate opens: recv would time out otherwise
	require.ErrorIs(t, out.err, context.Canceled)
	require.ErrorIs(t, out.err, ErrNotSent)
	assert.EqualValues(t, 11010, a.BufferedBytes(), "the bytes of the dropped item are back")

	cancelSync()
	err := recv(t, syncErr)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrNotSent)
	assert.EqualValues(t, 1010, a.BufferedBytes(), "the bytes of the synchronous caller are back")

	close(rec.gate)
	require.NoError(t, recv(t, first).err)
	require.NoError(t, recv(t, kept).err)
	bs, _ := rec.snapshot()
	assert.Equal(t, [][]int{{0}, {2}}, bs, "withdrawn items are not sent")
	waitUntil(t, func() bool { return a.BufferedBytes() == 0 }, "bytes released")
	select {
	case o := <-dropped:
		t.Fatalf("a second outcome for the dropped item: %v", o)
	default:
	}
}

// An item that has waited longer than a tick is watched, and leaves the
// moment its context ends; one whose context cannot end is never watched.
func TestLongWaitingItemIsWatched(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{MaxDelay: 2 * time.Millisecond}})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 10)
	recv(t, rec.started)
	forever := asyncAdd(t, a, ctx, "k", 1, 10)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dropped := asyncAdd(t, a, cctx, "k", 2, 100)
	waitUntil(t, func() bool {
		a.mu.RLock()
		q := a.queues["k"]
		a.mu.RUnlock()
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.watched == 2 && q.pending[1].stop != nil && q.pending[0].stop == nil
	}, "the item to be watched")
	cancel()
	out := recv(t, dropped)
	require.ErrorIs(t, out.err, ErrNotSent)
	require.ErrorIs(t, out.err, context.Canceled)
	assert.EqualValues(t, 20, a.BufferedBytes())
	close(rec.gate)
	require.NoError(t, recv(t, first).err)
	require.NoError(t, recv(t, forever).err)
}

// The items in the middle of a buffer can be withdrawn in any order, the
// head included; the others keep their order and their batches, and each
// item gets exactly one outcome.
func TestWithdrawalsKeepTheRestInOrder(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{BatchMaxCount: 3}})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 1)
	recv(t, rec.started)
	const n = 10
	var outs [n]<-chan outcome
	var cancels [n]context.CancelFunc
	for i := 1; i < n; i++ {
		c, cancel := context.WithCancel(ctx)
		outs[i], cancels[i] = asyncAdd(t, a, c, "k", i, 1), cancel
	}
	for _, i := range []int{5, 1, 2, 8} {
		cancels[i]()
		require.ErrorIs(t, recv(t, outs[i]).err, ErrNotSent, "item %d", i)
	}
	assert.Equal(t, 5, livePending(a, "k"))
	assert.Equal(t, 7, pendingLen(a, "k"), "the withdrawn head is gone, the others wait for take")
	assert.EqualValues(t, 6, a.BufferedBytes())
	close(rec.gate)
	require.NoError(t, recv(t, first).err)
	for _, i := range []int{3, 4, 6, 7, 9} {
		o := recv(t, outs[i])
		require.NoError(t, o.err, "item %d", i)
		assert.Equal(t, i*10, o.v)
	}
	bs, _ := rec.snapshot()
	assert.Equal(t, [][]int{{0}, {3, 4, 6}, {7, 9}}, bs, "the count cap counts items still buffered only")
	for i := 1; i < n; i++ {
		cancels[i]()
	}
	waitUntil(t, func() bool { return a.BufferedBytes() == 0 }, "bytes released")
}

// Contexts ending while their items are buffered, taken or in flight, from
// many goroutines: every item gets one outcome, an item reported as not
// sent was never given to the flush function, and the bytes come back to
// zero.
func TestWithdrawalRacesTake(t *testing.T) {
	var (
		mu      sync.Mutex
		flushed = map[int]bool{}
	)
	a, err := New(Config{
		Limits:            Limits{MaxDelay: time.Millisecond, BatchMaxBytes: 2 << 10, TotalBatchMaxBytes: 64 << 10},
		MaxInflightPerKey: 1,
	}, func(ctx context.Context, _ string, items []int, results []Result[int]) error {
		mu.Lock()
		for _, it := range items {
			if flushed[it] {
				t.Errorf("item %d flushed twice", it)
			}
			flushed[it] = true
		}
		mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		return nil
	})
	require.NoError(t, err)

	const goroutines, per = 8, 400
	var (
		outcomes   [goroutines * per]atomic.Int32
		notSent    [goroutines * per]atomic.Bool
		accepted   atomic.Int64
		wg, events sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range per {
				item := g*per + i
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(time.Duration(r.IntN(3000))*time.Microsecond, cancel)
				key := string(rune('a' + r.IntN(2)))
				if r.IntN(4) == 0 {
					_, err := a.Add(ctx, key, item, 100+r.IntN(400))
					outcomes[item].Add(1)
					notSent[item].Store(err != nil && errorsIsNotSent(err))
					continue
				}
				events.Add(1)
				err := a.AddAsync(ctx, key, item, 100+r.IntN(400), func(_ int, err error) {
					outcomes[item].Add(1)
					notSent[item].Store(err != nil && errorsIsNotSent(err))
					events.Done()
				})
				if err != nil {
					events.Done()
					outcomes[item].Add(1)
					notSent[item].Store(true)
					continue
				}
				accepted.Add(1)
			}
		})
	}
	wg.Wait()
	events.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, a.Close(ctx))
	mu.Lock()
	defer mu.Unlock()
	withdrawn := 0
	for item := range outcomes {
		require.EqualValues(t, 1, outcomes[item].Load(), "item %d: outcomes", item)
		if notSent[item].Load() {
			withdrawn++
			require.False(t, flushed[item], "item %d was reported not sent but was flushed", item)
		}
	}
	assert.Zero(t, a.BufferedBytes())
	assert.Zero(t, a.outstanding.Load())
	t.Logf("accepted asynchronously %d, not sent %d, flushed %d", accepted.Load(), withdrawn, len(flushed))
}

func errorsIsNotSent(err error) bool { return errors.Is(err, ErrNotSent) }

// livePending is the number of items buffered for key, withdrawn ones left
// out.
func livePending(a *Accumulator[string, int, int], key string) int {
	a.mu.RLock()
	q := a.queues[key]
	a.mu.RUnlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending) - q.withdrawn
}
