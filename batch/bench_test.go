package batch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// simServer stands for a broker reached over loopback on a small machine:
// one request at a time is served (the broker's CPU), each costing a fixed
// part (RPC framing, syscalls, the store's append path) plus a part per item
// (copying and indexing one message). It burns CPU rather than sleeping, as
// the real path does, so the accumulator's own overhead competes with it.
//
// With rtt set it stands instead for a remote server with spare capacity:
// every call just waits perCall + n*perItem, concurrently with the others.
type simServer struct {
	mu      sync.Mutex
	rtt     bool
	perCall time.Duration
	perItem time.Duration
	calls   atomic.Int64
	items   atomic.Int64
}

func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

func (s *simServer) call(n int) {
	if s.rtt {
		time.Sleep(s.perCall + time.Duration(n)*s.perItem)
		s.calls.Add(1)
		s.items.Add(int64(n))
		return
	}
	s.mu.Lock()
	spin(s.perCall + time.Duration(n)*s.perItem)
	s.mu.Unlock()
	s.calls.Add(1)
	s.items.Add(int64(n))
}

const benchItemBytes = 1024

// runSenders runs total sends spread over c goroutines and reports msgs/s
// and the p99 latency of one send.
func runSenders(b *testing.B, c int, send func(ctx context.Context) error) {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	total := int64(b.N)
	lat := make([][]time.Duration, c)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, b.N/c+1)
			for next.Add(1) <= total {
				t0 := time.Now()
				if err := send(ctx); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			lat[g] = mine
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	var p99 time.Duration
	if len(all) > 0 {
		p99 = all[(len(all)*99)/100]
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(p99)/float64(time.Millisecond), "p99_ms")
}

func benchServer(model string) *simServer {
	return &simServer{rtt: model == "rtt", perCall: 100 * time.Microsecond, perItem: 2 * time.Microsecond}
}

// BenchmarkSyncSend compares synchronous senders through the accumulator
// with the same senders calling the simulated server directly.
func BenchmarkSyncSend(b *testing.B) {
	for _, model := range []string{"cpu", "rtt"} {
		b.Run(model, func(b *testing.B) { benchSyncSend(b, model) })
	}
}

func benchSyncSend(b *testing.B, model string) {
	for _, c := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("direct/c%d", c), func(b *testing.B) {
			srv := benchServer(model)
			runSenders(b, c, func(context.Context) error { srv.call(1); return nil })
		})
		for _, mode := range []struct {
			name     string
			inflight int
			linger   bool
		}{{"batched", 1, false}, {"batched_inflight2", 2, false}, {"linger", 1, true}} {
			if mode.linger && (c > 16 || model != "cpu") {
				continue
			}
			b.Run(fmt.Sprintf("%s/c%d", mode.name, c), func(b *testing.B) {
				srv := benchServer(model)
				acc, err := New(Config{
					Limits:            Limits{MaxDelay: 10 * time.Millisecond, BatchMaxBytes: 256 << 10},
					MaxInflightPerKey: mode.inflight,
					Linger:            mode.linger,
				}, func(_ context.Context, _ string, items []int, results []Result[int]) error {
					srv.call(len(items))
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				runSenders(b, c, func(ctx context.Context) error {
					_, err := acc.Add(ctx, "q0", 1, benchItemBytes)
					return err
				})
				if err := acc.Close(context.Background()); err != nil {
					b.Fatal(err)
				}
				if calls := srv.calls.Load(); calls > 0 {
					b.ReportMetric(float64(srv.items.Load())/float64(calls), "items/batch")
				}
			})
		}
	}
}

// BenchmarkAddAsync measures the accumulator's own cost per item with a flush
// function that does nothing.
func BenchmarkAddAsync(b *testing.B) {
	acc, err := New(Config{}, func(_ context.Context, _ int, items []int, results []Result[int]) error {
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	cb := func(int, error) { wg.Done() }
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		wg.Add(1)
		if err := acc.AddAsync(ctx, i&7, i, 100, cb); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.StopTimer()
	if err := acc.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAddSyncIdle is the cost a lone synchronous sender pays for going
// through the accumulator: the flush runs in place and does nothing.
func BenchmarkAddSyncIdle(b *testing.B) {
	acc, err := New(Config{}, func(_ context.Context, _ string, items []int, results []Result[int]) error {
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := acc.Add(ctx, "q0", 1, benchItemBytes); err != nil {
			b.Fatal(err)
		}
	}
	if err := acc.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAddAsyncCancellable is BenchmarkAddAsync with contexts that can
// end, one shared by every item or one per item: an item left waiting in a
// buffer then watches its context (see Accumulator.watch), which the
// context-free BenchmarkAddAsync never pays for.
func BenchmarkAddAsyncCancellable(b *testing.B) {
	for _, shared := range []bool{true, false} {
		name := "ctx=own"
		if shared {
			name = "ctx=shared"
		}
		b.Run(name, func(b *testing.B) {
			acc, err := New(Config{}, func(_ context.Context, _ int, items []int, results []Result[int]) error {
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			cb := func(int, error) { wg.Done() }
			base, cancelBase := context.WithCancel(context.Background())
			defer cancelBase()
			var cancels []context.CancelFunc
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				ctx := base
				if !shared {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(base)
					cancels = append(cancels, cancel)
				}
				wg.Add(1)
				if err := acc.AddAsync(ctx, i&7, i, 100, cb); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			b.StopTimer()
			for _, cancel := range cancels {
				cancel()
			}
			if err := acc.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
