package batch

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatedAcc returns an accumulator whose flushes wait at the recorder's gate,
// and the recorder.
func gatedAcc(t *testing.T, cfg Config) (*Accumulator[string, int, int], *recorder) {
	rec := newRecorder()
	rec.gate = make(chan struct{})
	rec.started = make(chan int, 100)
	return newAcc(t, cfg, rec.flush), rec
}

func TestCapBlocksThenUnblocks(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{BatchMaxBytes: 1000, TotalBatchMaxBytes: 1000}})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 600)
	recv(t, rec.started)
	assert.EqualValues(t, 600, a.BufferedBytes(), "in flight counts against the cap")

	added := make(chan error, 1)
	go func() { added <- a.AddAsync(ctx, "other", 1, 600, func(int, error) {}) }()
	waitUntil(t, func() bool { return a.budget.nwait.Load() == 1 }, "the second add to block")
	assert.Len(t, added, 0)

	rec.gate <- struct{}{}
	require.NoError(t, recv(t, first).err)
	require.NoError(t, recv(t, added), "released bytes let the blocked add in")
	recv(t, rec.started)
	close(rec.gate)
	waitUntil(t, func() bool { return a.BufferedBytes() == 0 }, "bytes released")
}

func TestFailFast(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{BatchMaxBytes: 1000, TotalBatchMaxBytes: 1000}, FailFast: true})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 600)
	recv(t, rec.started)
	err := a.AddAsync(ctx, "k", 1, 600, func(int, error) { t.Error("callback of a refused item") })
	assert.ErrorIs(t, err, ErrBufferFull)
	_, err = a.Add(ctx, "k", 1, 600)
	assert.ErrorIs(t, err, ErrBufferFull)
	assert.EqualValues(t, 600, a.BufferedBytes(), "a refused item reserves nothing")
	close(rec.gate)
	require.NoError(t, recv(t, first).err)
	_, err = a.Add(ctx, "k", 1, 600)
	assert.NoError(t, err)
	assert.Zero(t, a.BufferedBytes())
}

func TestCancelWhileBlocked(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{BatchMaxBytes: 1000, TotalBatchMaxBytes: 1000}})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 900)
	recv(t, rec.started)

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Add(cctx, "k", 1, 500)
		errc <- err
	}()
	waitUntil(t, func() bool { return a.budget.nwait.Load() == 1 }, "the add to block")
	cancel()
	assert.ErrorIs(t, recv(t, errc), context.Canceled)
	assert.Zero(t, a.budget.nwait.Load())
	assert.EqualValues(t, 900, a.BufferedBytes(), "the cancelled add took nothing and released nothing")

	close(rec.gate)
	require.NoError(t, recv(t, first).err)
	assert.Zero(t, a.BufferedBytes())
}

func TestCancelledHeadWakesFollowers(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{BatchMaxBytes: 1000, TotalBatchMaxBytes: 1000}})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 500)
	recv(t, rec.started)

	bigCtx, cancelBig := context.WithCancel(ctx)
	bigErr := make(chan error, 1)
	go func() { bigErr <- a.AddAsync(bigCtx, "k", 1, 900, func(int, error) {}) }()
	waitUntil(t, func() bool { return a.budget.nwait.Load() == 1 }, "the big add to queue")
	smallErr := make(chan error, 1)
	go func() { smallErr <- a.AddAsync(ctx, "j", 2, 400, func(int, error) {}) }()
	waitUntil(t, func() bool { return a.budget.nwait.Load() == 2 }, "the small add to queue behind it")

	// FIFO: the small item fits but waits behind the big one; once the big
	// one gives up, the small one gets in.
	cancelBig()
	assert.ErrorIs(t, recv(t, bigErr), context.Canceled)
	assert.NoError(t, recv(t, smallErr))
	close(rec.gate)
	require.NoError(t, recv(t, first).err)
	waitUntil(t, func() bool { return a.BufferedBytes() == 0 }, "bytes released")
}

func TestItemSizes(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{Limits: Limits{BatchMaxBytes: 100, TotalBatchMaxBytes: 1000}}, rec.flush)
	ctx := context.Background()
	_, err := a.Add(ctx, "k", 1, 1001)
	assert.ErrorIs(t, err, ErrTooLarge)
	_, err = a.Add(ctx, "k", 1, -1)
	assert.ErrorIs(t, err, ErrInvalidSize)
	v, err := a.Add(ctx, "k", 2, 500)
	require.NoError(t, err, "larger than a batch, within the total: goes alone")
	assert.Equal(t, 20, v)
	_, err = a.Add(ctx, "k", 3, 0)
	assert.NoError(t, err, "zero-size items are fine")
	assert.Zero(t, a.BufferedBytes())
}

func TestOversizedItemGoesAlone(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{MaxDelay: time.Minute, BatchMaxBytes: 100, TotalBatchMaxBytes: 10000}})
	ctx := context.Background()
	var outs []<-chan outcome
	outs = append(outs, asyncAdd(t, a, ctx, "k", 0, 10))
	recv(t, rec.started)
	for i, size := range []int{30, 30, 500, 30} {
		outs = append(outs, asyncAdd(t, a, ctx, "k", i+1, size))
	}
	close(rec.gate)
	for _, ch := range outs {
		require.NoError(t, recv(t, ch).err)
	}
	bs, _ := rec.snapshot()
	assert.Equal(t, [][]int{{0}, {1, 2}, {3}, {4}}, bs)
}

func TestCancelledItemIsNotSent(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{MaxDelay: time.Minute}})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 10)
	recv(t, rec.started)
	cctx, cancel := context.WithCancel(ctx)
	dropped := asyncAdd(t, a, cctx, "k", 1, 10)
	kept := asyncAdd(t, a, ctx, "k", 2, 10)
	syncErr := make(chan error, 1)
	go func() {
		_, err := a.Add(cctx, "k", 3, 10)
		syncErr <- err
	}()
	waitUntil(t, func() bool { return pendingLen(a, "k") == 3 }, "three items buffered")
	cancel()
	assert.ErrorIs(t, recv(t, syncErr), context.Canceled, "a sync caller stops waiting")
	close(rec.gate)
	require.NoError(t, recv(t, first).err)
	assert.ErrorIs(t, recv(t, dropped).err, context.Canceled)
	assert.NoError(t, recv(t, kept).err)
	bs, _ := rec.snapshot()
	assert.Equal(t, [][]int{{0}, {2}}, bs, "items whose ctx ended before their batch was cut are not sent")
	waitUntil(t, func() bool { return a.BufferedBytes() == 0 }, "bytes released")
}

func TestSetLimits(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{MaxDelay: time.Minute, BatchMaxBytes: 1000, TotalBatchMaxBytes: 1000}})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 800)
	recv(t, rec.started)
	added := make(chan error, 1)
	go func() { added <- a.AddAsync(ctx, "k", 1, 800, func(int, error) {}) }()
	waitUntil(t, func() bool { return a.budget.nwait.Load() == 1 }, "blocked on the cap")

	require.NoError(t, a.SetLimits(Limits{MaxDelay: time.Minute, BatchMaxBytes: 1000, BatchMaxCount: 2, TotalBatchMaxBytes: 5000}))
	require.NoError(t, recv(t, added), "a raised cap lets the waiter in")
	var outs []<-chan outcome
	for i := 2; i < 6; i++ {
		outs = append(outs, asyncAdd(t, a, ctx, "k", i, 1))
	}
	close(rec.gate)
	require.NoError(t, recv(t, first).err)
	for _, ch := range outs {
		require.NoError(t, recv(t, ch).err)
	}
	bs, _ := rec.snapshot()
	assert.Equal(t, [][]int{{0}, {1, 2}, {3, 4}, {5}}, bs, "the new count cap applies to new batches")
	assert.Equal(t, 2, a.Limits().BatchMaxCount)

	err := a.SetLimits(Limits{BatchMaxBytes: 10, TotalBatchMaxBytes: 5})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestConfigValidation(t *testing.T) {
	fn := newRecorder().flush
	for name, cfg := range map[string]Config{
		"tiny delay":        {Limits: Limits{MaxDelay: time.Microsecond}},
		"huge delay":        {Limits: Limits{MaxDelay: time.Hour}},
		"negative bytes":    {Limits: Limits{BatchMaxBytes: -1}},
		"negative count":    {Limits: Limits{BatchMaxCount: -1}},
		"negative total":    {Limits: Limits{TotalBatchMaxBytes: -1}},
		"total below batch": {Limits: Limits{BatchMaxBytes: 2000, TotalBatchMaxBytes: 1000}},
		"negative inflight": {MaxInflightPerKey: -1},
	} {
		_, err := New(cfg, fn)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	_, err := New[string, int, int](Config{}, nil)
	assert.ErrorIs(t, err, ErrInvalidConfig)

	a := newAcc(t, Config{Limits: Limits{BatchMaxBytes: 64 << 20}}, fn)
	assert.Equal(t, Limits{
		MaxDelay: DefaultMaxDelay, BatchMaxBytes: 64 << 20, TotalBatchMaxBytes: 64 << 20,
	}, a.Limits(), "the default total grows to hold one batch")
	assert.ErrorIs(t, a.AddAsync(context.Background(), "k", 1, 1, nil), ErrNilCallback)
}

// TestReleaseExactlyOnce drives every path an item can take (success, flush
// failure, per-item failure, ctx ending before the send, ctx ending while in
// flight, refusal on a full buffer, Close) from many goroutines, and checks
// that every accepted item got exactly one outcome and that the reserved
// bytes, and the gauge that exports them, come back to zero.
func TestReleaseExactlyOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	var calls atomic.Int64
	boom := errors.New("boom")
	a, err := New(Config{
		Limits:            Limits{MaxDelay: 2 * time.Millisecond, BatchMaxBytes: 4 << 10, BatchMaxCount: 16, TotalBatchMaxBytes: 16 << 10},
		MaxInflightPerKey: 2,
		Registerer:        reg,
	}, func(ctx context.Context, _ string, items []int, results []Result[int]) error {
		n := calls.Add(1)
		time.Sleep(time.Duration(n%3) * 100 * time.Microsecond)
		if n%5 == 0 {
			return boom
		}
		for i, it := range items {
			if it%7 == 0 {
				results[i].Err = boom
			}
		}
		return nil
	})
	require.NoError(t, err)

	var accepted, outcomes, refused atomic.Int64 // AddAsync calls
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 300 {
				ctx, cancel := context.WithCancel(context.Background())
				if r.IntN(8) == 0 {
					time.AfterFunc(time.Duration(r.IntN(300))*time.Microsecond, cancel)
				}
				key := string(rune('a' + r.IntN(4)))
				size := 100 + r.IntN(1500)
				if r.IntN(2) == 0 {
					// A synchronous caller's outcome is its return value.
					_, _ = a.Add(ctx, key, i, size)
				} else {
					err := a.AddAsync(ctx, key, i, size, func(int, error) { outcomes.Add(1) })
					if err == nil {
						accepted.Add(1)
					} else {
						refused.Add(1)
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	waitUntil(t, func() bool { return a.outstanding.Load() == 0 }, "every outcome delivered")
	assert.Equal(t, 0.0, gaugeValue(t, reg), "the exported gauge is back to zero")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, a.Close(ctx))
	assert.Equal(t, accepted.Load(), outcomes.Load(), "one callback per accepted item")
	assert.Zero(t, a.BufferedBytes())
	assert.Zero(t, a.outstanding.Load())
	assert.Zero(t, a.budget.nwait.Load())
	t.Logf("accepted %d, refused %d, flushes %d", accepted.Load(), refused.Load(), calls.Load())
}

func gaugeValue(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "twinmq_batch_buffered_bytes" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no buffered-bytes gauge")
	return 0
}

func TestCloseFailsBlockedAdds(t *testing.T) {
	a, rec := gatedAcc(t, Config{Limits: Limits{BatchMaxBytes: 100, TotalBatchMaxBytes: 100}})
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 100)
	recv(t, rec.started)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Add(ctx, "k", 1, 50)
		errc <- err
	}()
	waitUntil(t, func() bool { return a.budget.nwait.Load() == 1 }, "the add to block")
	closed := make(chan error, 1)
	go func() { closed <- a.Close(ctx) }()
	assert.ErrorIs(t, recv(t, errc), ErrClosed)
	close(rec.gate)
	require.NoError(t, recv(t, closed))
	require.NoError(t, recv(t, first).err)
	assert.Zero(t, a.BufferedBytes())
}

func TestDoneContextIsRefused(t *testing.T) {
	a := newAcc(t, Config{}, newRecorder().flush)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := a.Add(ctx, "k", 1, 10)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, a.AddAsync(ctx, "k", 1, 10, func(int, error) { t.Error("callback of a refused item") }), context.Canceled)
	assert.Zero(t, a.BufferedBytes())
}
