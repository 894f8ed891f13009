package timer

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store"
)

// accuracy is the outcome of one real-time run.
type accuracy struct {
	late        []time.Duration // sorted lateness of each delivery
	early, dups int
	p50, p99    time.Duration
	max         time.Duration
}

// runAccuracy schedules n messages with uniformly random delays in
// [0, maxDelay) on a store in a temporary directory, with the wall clock,
// and lets the Deliverer append each due message to its topic (the broker's
// path). Lateness is the time of that append minus the delivery time.
func runAccuracy(tb testing.TB, n int, maxDelay time.Duration) accuracy {
	dir := tb.TempDir()
	st := openStore(tb, store.Options{Dir: filepath.Join(dir, "store")})
	defer st.Close()
	rec := newRecorder(RealClock(), st)
	tm := openTimer(tb, st, nil, filepath.Join(dir, "timer"), rec, nil)
	defer tm.Close()

	const senders = 8
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 11))
			for i := s; i < n; i += senders {
				at := time.Now().Add(time.Duration(rng.Int64N(int64(maxDelay))))
				if _, err := tm.Schedule(testCtx(tb), delayed(fmt.Sprint("a", i), "dest", int32(i%8)), at); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(tb, err)
	}
	waitFor(tb, maxDelay+60*time.Second, "all deliveries", func() bool { return rec.distinct() == n })
	var a accuracy
	for _, d := range rec.snapshot() {
		l := d.when.Sub(time.UnixMilli(d.at))
		if d.when.UnixMilli() < d.at {
			a.early++
		}
		a.late = append(a.late, l)
	}
	a.dups = rec.dups()
	sortDurations(a.late)
	a.p50, a.p99, a.max = percentile(a.late, 0.50), percentile(a.late, 0.99), a.late[len(a.late)-1]
	return a
}

// TestAccuracy10k is the acceptance run: 10,000 messages with
// random delays up to 10 s, every one delivered once and none early. The
// lateness figures are reported by the benchmarks of make bench-delay; here
// they are only logged.
func TestAccuracy10k(t *testing.T) {
	a := runAccuracy(t, 10_000, 10*time.Second)
	require.Zero(t, a.early, "messages delivered before their time")
	require.Zero(t, a.dups, "messages delivered twice")
	require.Len(t, a.late, 10_000)
	t.Logf("lateness p50 %s, p99 %s, max %s", a.p50, a.p99, a.max)
}

// BenchmarkDelayLateness runs the 10,000-message, 10-second schedule once
// per iteration and reports the 99th percentile lateness of the timer alone
// (due time to the append into the real topic) in ms as the figure
// delay_timer_p99_late_ms. Run it with -benchtime 1x. The end-to-end
// figure, at a consumer, is the embedded package's BenchmarkDelayEndToEnd.
func BenchmarkDelayLateness(b *testing.B) {
	var p50, p99, worst float64
	for b.Loop() {
		a := runAccuracy(b, 10_000, 10*time.Second)
		if a.early > 0 || a.dups > 0 {
			b.Fatalf("%d early and %d duplicate deliveries", a.early, a.dups)
		}
		p50 = float64(a.p50.Microseconds()) / 1000
		p99 = float64(a.p99.Microseconds()) / 1000
		worst = float64(a.max.Microseconds()) / 1000
	}
	b.ReportMetric(p50, "p50_late_ms")
	b.ReportMetric(worst, "max_late_ms")
	b.ReportMetric(p99, "fig:delay_timer_p99_late_ms")
}
