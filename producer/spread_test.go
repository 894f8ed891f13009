package producer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slotsUsed returns which slots the next few messages take.
func slotsUsed(s *spread) map[int]bool {
	seen := map[int]bool{}
	for range 8 {
		got := s.slot()
		for i := range s.slots {
			if got == &s.slots[i] {
				seen[i] = true
			}
		}
	}
	return seen
}

// Small batches keep one target; large ones start on two; a topic whose
// batches shrink goes back to one.
func TestSpreadEligibility(t *testing.T) {
	var s spread
	now := time.Now()
	feed := func(items, n int) {
		for range n {
			now = now.Add(time.Millisecond)
			s.observe(items, now)
		}
	}
	feed(1, 100)
	require.Equal(t, map[int]bool{0: true}, slotsUsed(&s), "lone sends: one target")
	feed(spreadWiden-1, 100)
	require.Equal(t, map[int]bool{0: true}, slotsUsed(&s), "mid-sized batches: still one")
	feed(40, 5)
	require.Equal(t, map[int]bool{0: true, 1: true}, slotsUsed(&s), "large batches: two targets in turn")
	feed(2, 100)
	require.Equal(t, map[int]bool{0: true}, slotsUsed(&s), "small batches: back to one")
}

// The controller ends on the width that delivers more messages per second,
// whichever it is, and keeps its choice when both deliver the same.
func TestSpreadFollowsThroughput(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate [maxSpread]float64 // messages per second at width 1 and 2
		want int32              // the width (as spread.width) it should hold
	}{
		{name: "chain-bound: two is faster", rate: [2]float64{150_000, 200_000}, want: 1},
		{name: "cpu-bound: one is faster", rate: [2]float64{48_000, 38_000}, want: 0},
		{name: "a steady offered load: a tie keeps two", rate: [2]float64{50_000, 50_000}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s spread
			now := time.Now()
			held := map[int32]time.Duration{}
			for range 20_000 {
				w := s.width.Load()
				items := 36 / int(w+1) // a fixed number of senders split over the targets
				step := time.Duration(float64(items) / tc.rate[w] * float64(time.Second))
				now = now.Add(step)
				held[w] += step
				s.observe(items, now)
			}
			require.Equal(t, tc.want, s.ctl.chosen)
			other := maxSpread - 1 - tc.want
			require.Less(t, held[other], held[tc.want]/3, "time at each width: %v", held)
		})
	}
}

// A choice that trials keep confirming is tried less and less often, down
// to one trial in spreadSettleMax windows; when the load changes, trials
// come back at once and find the new best width.
func TestSpreadTrialsBackOff(t *testing.T) {
	var s spread
	now := time.Now()
	rate := [maxSpread]float64{150_000, 200_000} // chain-bound: two is faster
	trials := 0
	run := func(d time.Duration) map[int32]time.Duration {
		held := map[int32]time.Duration{}
		for end := now.Add(d); now.Before(end); {
			w := s.width.Load()
			items := 36 / int(w+1)
			step := time.Duration(float64(items) / rate[w] * float64(time.Second))
			now = now.Add(step)
			held[w] += step
			before := s.ctl.trial
			s.observe(items, now)
			if before == 0 && s.ctl.trial == 1 {
				trials++
			}
		}
		return held
	}
	run(10 * time.Second) // settle
	trials = 0
	held := run(20 * time.Second)
	require.Equal(t, int32(1), s.ctl.chosen)
	require.LessOrEqual(t, trials, 8, "a confirmed choice is tried every %v at most", spreadSettleMax*spreadWindow)
	require.Less(t, held[0], held[1]/50, "time at the other width: %v", held)

	// The load turns CPU-bound and slower: one target is now faster.
	rate = [maxSpread]float64{60_000, 40_000}
	start := now
	for s.ctl.chosen != 0 && now.Sub(start) < 2*time.Second {
		run(spreadWindow)
	}
	require.Equal(t, int32(0), s.ctl.chosen, "the new best width is found within %v", now.Sub(start))
}

// Bursts with idle gaps between them (as the alternating rounds of
// BenchmarkProduce give the batched producer) are measured over the
// bursts: a window over a pause would make either width look slow.
func TestSpreadIgnoresPauses(t *testing.T) {
	var s spread
	now := time.Now()
	rate := [maxSpread]float64{150_000, 200_000} // chain-bound: two is faster
	held := map[int32]time.Duration{}
	for range 60 {
		for end := now.Add(60 * time.Millisecond); now.Before(end); {
			w := s.width.Load()
			items := 36 / int(w+1)
			step := time.Duration(float64(items) / rate[w] * float64(time.Second))
			now = now.Add(step)
			held[w] += step
			s.observe(items, now)
		}
		now = now.Add(300 * time.Millisecond)
	}
	require.Equal(t, int32(1), s.ctl.chosen)
	require.Less(t, held[0], held[1]/5, "time at each width: %v", held)
}
