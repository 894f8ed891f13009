package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIdleKeySendsAtOnce(t *testing.T) {
	rec := newRecorder()
	// A one-minute delay: if the item waited for the timer the test would
	// time out.
	a := newAcc(t, Config{Limits: Limits{MaxDelay: time.Minute}}, rec.flush)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for i := range 5 {
		v, err := a.Add(ctx, "k", i, 10)
		require.NoError(t, err)
		assert.Equal(t, i*10, v)
	}
	bs, _ := rec.snapshot()
	assert.Equal(t, [][]int{{0}, {1}, {2}, {3}, {4}}, bs, "a sequential sender goes unbatched")
	assert.Zero(t, a.BufferedBytes())
}

func TestFlushOnSizeWhileBusy(t *testing.T) {
	rec := newRecorder()
	rec.gate = make(chan struct{})
	rec.started = make(chan int, 10)
	reg := prometheus.NewRegistry()
	a := newAcc(t, Config{
		Limits:            Limits{MaxDelay: time.Minute, BatchMaxBytes: 400},
		MaxInflightPerKey: 2,
		Registerer:        reg,
	}, rec.flush)
	ctx := context.Background()

	first := asyncAdd(t, a, ctx, "k", 0, 100)
	assert.Equal(t, 1, recv(t, rec.started), "idle key: the first item leaves alone")
	// The key is busy: items accumulate until 400 bytes seal a batch, which
	// takes the second slot at once.
	var outs []<-chan outcome
	for i := 1; i <= 4; i++ {
		outs = append(outs, asyncAdd(t, a, ctx, "k", i, 100))
	}
	assert.Equal(t, 4, recv(t, rec.started), "a full batch leaves without the timer")
	rec.gate <- struct{}{}
	rec.gate <- struct{}{}
	assert.NoError(t, recv(t, first).err)
	for i, ch := range outs {
		o := recv(t, ch)
		assert.NoError(t, o.err)
		assert.Equal(t, (i+1)*10, o.v)
	}
	assert.Equal(t, 1.0, flushes(a, reasonFull))
	assert.Equal(t, 1.0, flushes(a, reasonIdle))
}

func TestFlushOnSizeLinger(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{
		Limits: Limits{MaxDelay: time.Minute, BatchMaxBytes: 1000, BatchMaxCount: 3},
		Linger: true,
	}, rec.flush)
	ctx := context.Background()
	var outs []<-chan outcome
	for i := range 7 {
		outs = append(outs, asyncAdd(t, a, ctx, "k", i, 10))
	}
	for _, ch := range outs[:6] {
		assert.NoError(t, recv(t, ch).err)
	}
	bs, _ := rec.snapshot()
	assert.Equal(t, [][]int{{0, 1, 2}, {3, 4, 5}}, bs, "count cap seals batches; the seventh item lingers")
	require.NoError(t, a.Close(ctx))
	assert.NoError(t, recv(t, outs[6]).err)
}

func TestFlushOnTimer(t *testing.T) {
	const delay = 40 * time.Millisecond
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	a := newAcc(t, Config{Limits: Limits{MaxDelay: delay}, Linger: true, Registerer: reg}, rec.flush)
	start := time.Now()
	o := recv(t, asyncAdd(t, a, context.Background(), "k", 7, 10))
	require.NoError(t, o.err)
	// The lower bound is by construction: the ticker runs at MaxDelay/2 and
	// only starts batches that would pass MaxDelay by its next run.
	assert.GreaterOrEqual(t, time.Since(start), delay/2)
	assert.Equal(t, 1.0, flushes(a, reasonTimer))
}

func TestTimerStartsSecondSlotWhileBusy(t *testing.T) {
	rec := newRecorder()
	rec.gate = make(chan struct{})
	rec.started = make(chan int, 10)
	a := newAcc(t, Config{Limits: Limits{MaxDelay: 20 * time.Millisecond}, MaxInflightPerKey: 2}, rec.flush)
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 10)
	recv(t, rec.started)
	second := asyncAdd(t, a, ctx, "k", 1, 10)
	// Not full and the key is busy: only the timer can start it.
	assert.Equal(t, 1, recv(t, rec.started))
	close(rec.gate)
	assert.NoError(t, recv(t, first).err)
	assert.NoError(t, recv(t, second).err)
}

func TestCloseFlushesEverything(t *testing.T) {
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	a, err := New(Config{Limits: Limits{MaxDelay: time.Minute}, Linger: true, Registerer: reg}, rec.flush)
	require.NoError(t, err)
	ctx := context.Background()
	var outs []<-chan outcome
	for i := range 10 {
		outs = append(outs, asyncAdd(t, a, ctx, fmt.Sprintf("k%d", i%3), i, 10))
	}
	assert.Zero(t, rec.itemCount(), "lingering, nothing is full yet")
	require.NoError(t, a.Close(ctx))
	for _, ch := range outs {
		assert.NoError(t, recv(t, ch).err)
	}
	assert.Equal(t, 10, rec.itemCount())
	assert.Equal(t, 3.0, flushes(a, reasonClose))
	assert.Zero(t, a.BufferedBytes())

	_, err = a.Add(ctx, "k0", 1, 1)
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, a.AddAsync(ctx, "k0", 1, 1, func(int, error) {}), ErrClosed)
	require.NoError(t, a.Close(ctx), "Close again")
	// Close unregisters, so a successor can register on the same registry.
	newAcc(t, Config{Registerer: reg}, rec.flush)
}

func TestCloseKeepsInflightLimit(t *testing.T) {
	rec := newRecorder()
	rec.gate = make(chan struct{})
	rec.started = make(chan int, 10)
	a := newAcc(t, Config{Limits: Limits{MaxDelay: time.Minute, BatchMaxCount: 2}}, rec.flush)
	ctx := context.Background()
	var outs []<-chan outcome
	outs = append(outs, asyncAdd(t, a, ctx, "k", 0, 1))
	recv(t, rec.started)
	for i := 1; i < 6; i++ {
		outs = append(outs, asyncAdd(t, a, ctx, "k", i, 1))
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close(ctx) }()
	for range 3 {
		rec.gate <- struct{}{}
		recv(t, rec.started)
	}
	rec.gate <- struct{}{}
	require.NoError(t, recv(t, closed))
	bs, _ := rec.snapshot()
	assert.Equal(t, [][]int{{0}, {1, 2}, {3, 4}, {5}}, bs)
	assert.False(t, rec.overlap)
	for _, ch := range outs {
		assert.NoError(t, recv(t, ch).err)
	}
}

func TestCloseGivesUp(t *testing.T) {
	rec := newRecorder()
	rec.gate = make(chan struct{}) // never opened: flushes end only by ctx
	rec.started = make(chan int, 10)
	a, err := New(Config{Limits: Limits{MaxDelay: time.Minute}}, rec.flush)
	require.NoError(t, err)
	ctx := context.Background()
	first := asyncAdd(t, a, ctx, "k", 0, 10)
	recv(t, rec.started)
	second := asyncAdd(t, a, ctx, "k", 1, 10)

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err = a.Close(cctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, recv(t, first).err, context.Canceled, "the running flush saw its ctx cancelled")
	assert.ErrorIs(t, recv(t, second).err, ErrClosed, "the batch behind it never started")
	assert.Len(t, rec.started, 0)
	waitUntil(t, func() bool { return a.BufferedBytes() == 0 }, "bytes released")
}

func TestNaturalBatching(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	seen := map[int]bool{}
	a := newAcc(t, Config{Limits: Limits{MaxDelay: time.Minute, BatchMaxBytes: 64 << 10}}, func(_ context.Context, _ string, items []int, results []Result[int]) error {
		time.Sleep(200 * time.Microsecond) // the RPC
		mu.Lock()
		sizes = append(sizes, len(items))
		for _, it := range items {
			seen[it] = true
		}
		mu.Unlock()
		return nil
	})
	const senders, each = 32, 40
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				_, err := a.Add(ctx, "k", g*each+i, 1024)
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, seen, senders*each)
	assert.Greater(t, slices.Max(sizes), 1, "concurrent senders share batches")
	assert.LessOrEqual(t, slices.Max(sizes), 64, "no batch passes the byte cap")
	assert.Less(t, len(sizes), senders*each, "fewer flushes than items")
	t.Logf("%d items in %d batches, largest %d", senders*each, len(sizes), slices.Max(sizes))
}

func TestOrderPerKey(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{Limits: Limits{MaxDelay: time.Millisecond, BatchMaxCount: 7}}, rec.flush)
	ctx := context.Background()
	keys := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			var last <-chan outcome
			for i := range 300 {
				last = asyncAdd(t, a, ctx, k, i, 1)
			}
			recv(t, last)
		})
	}
	wg.Wait()
	bs, ks := rec.snapshot()
	got := map[string][]int{}
	for i, b := range bs {
		got[ks[i]] = append(got[ks[i]], b...)
	}
	for _, k := range keys {
		require.Len(t, got[k], 300, k)
		assert.True(t, slices.IsSorted(got[k]), "key %s flushed out of order", k)
	}
	assert.False(t, rec.overlap, "MaxInflightPerKey 1: flushes of a key never overlap")
}

func TestErrorReachesEveryCaller(t *testing.T) {
	rec := newRecorder()
	rec.gate = make(chan struct{})
	rec.started = make(chan int, 10)
	boom := errors.New("broker down")
	rec.fail = boom
	a := newAcc(t, Config{Limits: Limits{MaxDelay: time.Minute}}, rec.flush)
	ctx := context.Background()
	var errs sync.Map
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := a.Add(ctx, "k", 0, 10)
		errs.Store(0, err)
	})
	recv(t, rec.started)
	for i := 1; i <= 5; i++ {
		wg.Go(func() {
			_, err := a.Add(ctx, "k", i, 10)
			errs.Store(i, err)
		})
	}
	waitUntil(t, func() bool { return pendingLen(a, "k") == 5 }, "five items buffered")
	close(rec.gate)
	wg.Wait()
	for i := range 6 {
		err, _ := errs.Load(i)
		assert.ErrorIs(t, err.(error), boom, "item %d", i)
	}
	bs, _ := rec.snapshot()
	require.Len(t, bs, 2, "the five waited behind the first and went together")
	assert.ElementsMatch(t, []int{1, 2, 3, 4, 5}, bs[1])
	assert.Zero(t, a.BufferedBytes())
}

func TestPerItemResults(t *testing.T) {
	bad := errors.New("rejected")
	a := newAcc(t, Config{}, func(_ context.Context, _ string, items []int, results []Result[int]) error {
		for i, it := range items {
			if it%2 == 1 {
				results[i].Err = bad
			} else {
				results[i].Value = it + 100
			}
		}
		return nil
	})
	ctx := context.Background()
	v, err := a.Add(ctx, "k", 2, 1)
	require.NoError(t, err)
	assert.Equal(t, 102, v)
	_, err = a.Add(ctx, "k", 3, 1)
	assert.ErrorIs(t, err, bad)
}

// The results a flush function gets are zero on entry, though the
// accumulator reuses their memory from batch to batch.
func TestResultsStartZero(t *testing.T) {
	var dirty atomic.Bool
	a := newAcc(t, Config{}, func(_ context.Context, _ string, items []int, results []Result[int]) error {
		for i := range results {
			if results[i] != (Result[int]{}) {
				dirty.Store(true)
			}
			results[i] = Result[int]{Value: items[i], Err: errors.New("left over")}
		}
		for i := range results {
			if items[i]%2 == 0 {
				results[i].Err = nil
			}
		}
		return nil
	})
	ctx := context.Background()
	for i := range 50 {
		v, err := a.Add(ctx, "k", i, 1)
		if i%2 == 0 {
			require.NoError(t, err)
			require.Equal(t, i, v)
		} else {
			require.Error(t, err)
		}
	}
	require.False(t, dirty.Load(), "a flush saw the results of an earlier batch")
	assert.Zero(t, a.BufferedBytes())
}

func TestCallbackMayAdd(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{}, rec.flush)
	ctx := context.Background()
	done := make(chan outcome, 1)
	require.NoError(t, a.AddAsync(ctx, "k", 1, 1, func(int, error) {
		v, err := a.Add(ctx, "k", 2, 1)
		done <- outcome{v, err}
	}))
	o := recv(t, done)
	require.NoError(t, o.err)
	assert.Equal(t, 20, o.v)
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	rec := newRecorder()
	a, err := New(Config{Limits: Limits{MaxDelay: time.Millisecond}, MaxInflightPerKey: 2}, rec.flush)
	require.NoError(t, err)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if i%2 == 0 {
					_, err := a.Add(ctx, fmt.Sprint(g%3), i, 100)
					assert.NoError(t, err)
				} else {
					_ = asyncAdd(t, a, ctx, fmt.Sprint(g%3), i, 100)
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, a.Close(ctx))
	waitGoroutines(t, before)
}

func TestIdleKeysAreDropped(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{Limits: Limits{MaxDelay: 10 * time.Millisecond}}, rec.flush)
	for i := range 20 {
		_, err := a.Add(context.Background(), fmt.Sprint(i), i, 1)
		require.NoError(t, err)
	}
	keys := func() int {
		a.mu.RLock()
		defer a.mu.RUnlock()
		return len(a.queues)
	}
	assert.Equal(t, 20, keys())
	waitUntil(t, func() bool { return keys() == 0 }, "idle keys dropped")
	// A dropped key comes back on its next item.
	v, err := a.Add(context.Background(), "3", 3, 1)
	require.NoError(t, err)
	assert.Equal(t, 30, v)
}

func flushes(a *Accumulator[string, int, int], r reason) float64 {
	return testutil.ToFloat64(a.metrics.flushes[r])
}

func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	wrap := func(name string) prometheus.Registerer {
		return prometheus.WrapRegistererWith(prometheus.Labels{"producer": name}, reg)
	}
	a := newAcc(t, Config{Registerer: wrap("a")}, newRecorder().flush)
	_, err := a.Add(context.Background(), "k", 1, 300)
	require.NoError(t, err)
	n, err := testutil.GatherAndCount(reg,
		"twinmq_batch_flushes_total", "twinmq_batch_size_items", "twinmq_batch_size_bytes", "twinmq_batch_buffered_bytes")
	require.NoError(t, err)
	assert.Equal(t, 4+3, n, "four flush reasons, two histograms, one gauge")
	assert.Equal(t, 1.0, flushes(a, reasonIdle))

	_, err = New(Config{Registerer: wrap("a")}, newRecorder().flush)
	assert.Error(t, err, "a second accumulator with the same labels")
	newAcc(t, Config{Registerer: wrap("b")}, newRecorder().flush)
}
