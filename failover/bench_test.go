package failover

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
)

// benchPicker returns a picker over n equal resources in one group, or, with
// groups > 1, spread round-robin over that many priorities.
func benchPicker(b *testing.B, n, groups int) *Picker[int] {
	rs := make([]Resource[int], n)
	for i := range rs {
		rs[i] = Resource[int]{Key: "r" + strconv.Itoa(i), Value: i, Priority: i % groups}
	}
	return newPicker(b, rs, noRecovery[int]())
}

// pickLoop runs b.N picks (each followed by a Success if report) on one
// goroutine and reports the rate in two units:
//
//   - wall-picks/s: picks per second of wall-clock time, what a caller of
//     Pick sees end to end, including any time the picking thread waited for
//     a core;
//   - picks/cpu-s: picks per second of CPU time consumed by the picking OS
//     thread (CLOCK_THREAD_CPUTIME_ID, Linux only), the cost of a pick alone.
//
// fig, if set, names the figure published from the wall-clock rate. On a
// dedicated core the two rates agree; on a machine shared with other work
// the wall rate falls by whatever share of the core others take, and the
// figure says so rather than hide it: picks/cpu-s beside it tells a slow
// picker from a busy machine.
func pickLoop(b *testing.B, p *Picker[int], fig string, report bool, exclude ...*Handle[int]) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, haveCPU := threadCPU()
	var sink int
	for range b.N {
		h, err := p.Pick(exclude...)
		if err != nil {
			b.Fatal(err)
		}
		sink += h.Value()
		if report {
			p.Success(h, 0)
		}
	}
	cpu1, _ := threadCPU()
	b.StopTimer()
	_ = sink
	wall := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(wall, "wall-picks/s")
	if cpu := cpu1 - cpu0; haveCPU && cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "picks/cpu-s")
	}
	if fig != "" {
		b.ReportMetric(wall, "fig:"+fig)
	}
}

// BenchmarkPick measures a single goroutine picking. The figure
// failover_picks_s is the five-resource case (a handful of brokers, all
// healthy: the steady state of a producer) in picks per wall-clock second
// of the one picking goroutine: what a caller sees. The thread's CPU rate
// is printed beside it as picks/cpu-s.
//
// make bench-produce runs only the sub-benchmark n=5 (-bench
// '^BenchmarkPick$/^n=5$'). The variants of the five-resource case are
// therefore named "n=5-..." rather than "n=5/...": a sub-benchmark nested
// under n=5 would match that pattern as well.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{2, 5, 100} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			fig := ""
			if n == 5 {
				fig = "failover_picks_s"
			}
			pickLoop(b, benchPicker(b, n, 1), fig, false)
		})
	}
	// Two priority groups, the preferred one degraded so that traffic
	// spills: both groups are summed and two random numbers drawn.
	b.Run("n=5-spill", func(b *testing.B) {
		p := benchPicker(b, 5, 2)
		failN(p, lookup(b, p, "r0"), 7)
		failN(p, lookup(b, p, "r2"), 1)
		pickLoop(b, p, "", false)
	})
	// A retry: one resource excluded.
	b.Run("n=5-exclude", func(b *testing.B) {
		p := benchPicker(b, 5, 1)
		pickLoop(b, p, "", false, lookup(b, p, "r0"))
	})
	// What a sender does per message: pick, then report success.
	b.Run("n=5-pick+success", func(b *testing.B) {
		pickLoop(b, benchPicker(b, 5, 1), "", true)
	})
	// InflightAware: each pick is an atomic add, each report a CAS.
	b.Run("n=5-inflight", func(b *testing.B) {
		rs := make([]Resource[int], 5)
		for i := range rs {
			rs[i] = Resource[int]{Key: "r" + strconv.Itoa(i), Value: i}
		}
		pickLoop(b, newPicker(b, rs, Config[int]{Quarantine: -1, InflightAware: true}), "", true)
	})
}

// BenchmarkPickParallel measures picks from GOMAXPROCS goroutines at once,
// each reporting success: there is no shared write on this path, so it
// should scale with cores.
func BenchmarkPickParallel(b *testing.B) {
	p := benchPicker(b, 5, 2)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h, err := p.Pick()
			if err != nil {
				b.Error(err)
				return
			}
			p.Success(h, 0)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "wall-picks/s")
}
