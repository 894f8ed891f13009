package producer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A topic spreads over a second target only once its batches are large,
// and comes back to one when they shrink; in between it stays put.
func TestSpreadWidth(t *testing.T) {
	var s spread
	feed := func(items, n int) {
		for range n {
			s.observe(items)
		}
	}
	slots := func() map[int]bool {
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

	feed(1, 100)
	require.Equal(t, map[int]bool{0: true}, slots(), "lone sends: one target")
	feed(spreadWiden-1, 100)
	require.Equal(t, map[int]bool{0: true}, slots(), "mid-sized batches: still one")
	feed(40, 100)
	require.Equal(t, map[int]bool{0: true, 1: true}, slots(), "large batches: two targets in turn")
	feed(spreadNarrow+2, 100)
	require.Len(t, slots(), 2, "halved batches keep the width")
	feed(2, 100)
	require.Equal(t, map[int]bool{0: true}, slots(), "small batches: back to one")
}
