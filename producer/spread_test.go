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
