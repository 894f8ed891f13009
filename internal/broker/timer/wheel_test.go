package timer

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWheelHandsOutEachEntryOnceInOrderNeverEarly drives the wheel alone
// through random times spanning many revolutions.
func TestWheelHandsOutEachEntryOnceInOrderNeverEarly(t *testing.T) {
	for _, tc := range []struct {
		prec  int64
		slots int
	}{{10, 8}, {10, 4096}, {1, 2}, {100, 64}} {
		rng := rand.New(rand.NewPCG(uint64(tc.prec), uint64(tc.slots)))
		start := int64(1_700_000_000_000)
		w := newWheel(tc.prec, tc.slots, start)
		want := map[int64]int64{} // offset -> slot time
		var off int64
		add := func(now int64) {
			for i := rng.IntN(20); i > 0; i-- {
				at := now + rng.Int64N(tc.prec*int64(tc.slots)*5) - tc.prec*3
				slot := w.insert(entry{at: at, slot: at, offset: off})
				require.GreaterOrEqual(t, slot, at, "slot time moves only forward")
				want[off] = slot
				off++
			}
		}
		now := start
		add(now)
		lastSlot := int64(-1 << 63)
		for step := 0; step < 2000 || len(want) > 0; step++ {
			now += rng.Int64N(max(2, tc.prec*int64(tc.slots)/4))
			if step < 2000 {
				add(now)
			}
			for _, e := range w.advance(now, nil) {
				slot, ok := want[e.offset]
				require.True(t, ok, "entry %d handed out twice or never inserted", e.offset)
				delete(want, e.offset)
				require.Equal(t, slot, e.slot)
				require.LessOrEqual(t, e.slot, now, "handed out before its time")
				require.LessOrEqual(t, e.at, now, "handed out before its time")
				require.GreaterOrEqual(t, e.slot/tc.prec, lastSlot/tc.prec, "slot order")
				lastSlot = e.slot
			}
			// Everything whose slot ended by now is out.
			for o, slot := range want {
				if (slot/tc.prec+1)*tc.prec-1 <= now {
					t.Fatalf("entry %d (slot %d) overdue at %d", o, slot, now)
				}
			}
			if len(want) > 0 {
				next, ok := w.nextDue()
				require.True(t, ok)
				require.Greater(t, next, now)
			}
			require.Equal(t, len(want), w.len())
		}
		_, ok := w.nextDue()
		require.False(t, ok)
	}
}

func TestWheelIdleJumpAndFarBuckets(t *testing.T) {
	w := newWheel(10, 16, 0)
	day := int64(86_400_000)
	w.insert(entry{at: 3 * day, slot: 3 * day, offset: 1})
	w.insert(entry{at: day + 5, slot: day + 5, offset: 2})
	require.Empty(t, w.advance(day, nil))
	next, ok := w.nextDue()
	require.True(t, ok)
	require.LessOrEqual(t, next, day+9)
	got := w.advance(day+9, nil)
	require.Len(t, got, 1)
	require.EqualValues(t, 2, got[0].offset)
	require.Empty(t, w.advance(3*day+8, nil))
	got = w.advance(3*day+9, nil)
	require.Len(t, got, 1)
	require.EqualValues(t, 1, got[0].offset)
	require.Zero(t, w.len())
}

func TestRecordRoundTripAndCorruption(t *testing.T) {
	e := entry{at: 123456789, slot: 123456800, offset: 42, rolled: true}
	b := make([]byte, recordSize)
	encodeRecord(b, e)
	got, err := decodeRecord(b)
	require.NoError(t, err)
	require.Equal(t, e, got)
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		_, err := decodeRecord(c)
		require.ErrorIs(t, err, ErrCorrupt, "flip at byte %d", i)
	}
	_, err = decodeRecord(b[:10])
	require.ErrorIs(t, err, ErrCorrupt)
}
