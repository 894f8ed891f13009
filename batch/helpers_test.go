package batch

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitFor is generous: it only guards liveness, never timing.
const waitFor = 10 * time.Second

// recorder is a flush function that records its batches. Each call may be
// held at a gate until the test lets it go, and may fail with a set error.
type recorder struct {
	mu       sync.Mutex
	batches  [][]int
	keys     []string
	inflight map[string]int
	overlap  bool // two flushes of one key ran at once
	fail     error
	gate     chan struct{} // when non-nil every call waits for a token
	started  chan int      // when non-nil receives the size of each call
}

func newRecorder() *recorder { return &recorder{inflight: map[string]int{}} }

func (r *recorder) flush(ctx context.Context, key string, items []int, results []Result[int]) error {
	r.mu.Lock()
	r.inflight[key]++
	if r.inflight[key] > 1 {
		r.overlap = true
	}
	gate, started := r.gate, r.started
	r.mu.Unlock()
	if started != nil {
		started <- len(items)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			r.mu.Lock()
			r.inflight[key]--
			r.mu.Unlock()
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight[key]--
	r.batches = append(r.batches, append([]int(nil), items...))
	r.keys = append(r.keys, key)
	if r.fail != nil {
		return r.fail
	}
	for i, it := range items {
		results[i].Value = it * 10
	}
	return nil
}

func (r *recorder) snapshot() ([][]int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int(nil), r.batches...), append([]string(nil), r.keys...)
}

func (r *recorder) itemCount() int {
	bs, _ := r.snapshot()
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	return n
}

func newAcc(t *testing.T, cfg Config, fn FlushFunc[string, int, int]) *Accumulator[string, int, int] {
	t.Helper()
	a, err := New(cfg, fn)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a
}

// outcome is what an AddAsync callback received.
type outcome struct {
	v   int
	err error
}

// asyncAdd adds item and returns a channel that gets its outcome.
func asyncAdd(t *testing.T, a *Accumulator[string, int, int], ctx context.Context, key string, item, size int) <-chan outcome {
	t.Helper()
	ch := make(chan outcome, 1)
	require.NoError(t, a.AddAsync(ctx, key, item, size, func(v int, err error) { ch <- outcome{v, err} }))
	return ch
}

func recv[V any](t *testing.T, ch <-chan V) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatal("timed out")
	}
	panic("unreachable")
}

// waitUntil polls cond until it holds.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitGoroutines(t *testing.T, atMost int) {
	t.Helper()
	waitUntil(t, func() bool { return runtime.NumGoroutine() <= atMost }, "goroutines to exit")
}

// pendingLen is the number of items buffered (not in flight) for key.
func pendingLen(a *Accumulator[string, int, int], key string) int {
	a.mu.RLock()
	q := a.queues[key]
	a.mu.RUnlock()
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}
