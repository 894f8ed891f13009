package driver

import (
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMessageIDLayoutRoundTrip(t *testing.T) {
	g := newGenerator([]byte{0x02, 0x42, 0xac, 0x11, 0x00, 0x02}, 0x1f2e)
	at := time.Date(2026, 11, 22, 0, 15, 7, 0, time.UTC)
	id := g.next(at)
	assert.Regexp(t, regexp.MustCompile(`^01[0-9A-F]{32}$`), id)
	assert.Equal(t, "010242AC1100021F2E", id[:18])

	info, err := ParseMessageID(id)
	require.NoError(t, err)
	assert.Equal(t, "02:42:ac:11:00:02", info.MAC.String())
	assert.Equal(t, uint16(0x1f2e), info.PID)
	assert.True(t, info.Time.Equal(at), "time %v", info.Time)
	assert.Equal(t, uint32(0), info.Sequence)

	next, err := ParseMessageID(g.NextAt(at))
	require.NoError(t, err)
	assert.Equal(t, uint32(1), next.Sequence)
	assert.True(t, next.Time.Equal(at), "NextAt stamps the time it is given")
}

// A batch's ids: the empty slots get consecutive sequence numbers stamped
// with the batch's time, the ids the caller chose stay, and the sequence
// goes on after the block (also across its wrap).
func TestMessageIDBatchFill(t *testing.T) {
	g := newGenerator([]byte{1, 2, 3, 4, 5, 6}, 7)
	g.seq.Store(^uint32(0) - 1)
	at := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	ids := []string{"", "mine", "", "", ""}
	g.fillEmpty(ids, at)
	assert.Equal(t, "mine", ids[1])
	want := []uint32{^uint32(0) - 1, ^uint32(0), 0, 1}
	for k, i := range []int{0, 2, 3, 4} {
		info, err := ParseMessageID(ids[i])
		require.NoError(t, err, ids[i])
		assert.Equal(t, want[k], info.Sequence)
		assert.True(t, info.Time.Equal(at))
	}
	next, err := ParseMessageID(g.Next())
	require.NoError(t, err)
	assert.Equal(t, uint32(2), next.Sequence)

	given := []string{"a", "b"}
	g.fillEmpty(given, at)
	assert.Equal(t, []string{"a", "b"}, given)
}

func TestMessageIDsAreUnique(t *testing.T) {
	g := NewMessageIDGenerator()
	seen := map[string]bool{}
	for range 10000 {
		id := g.Next()
		require.False(t, seen[id], "duplicate %s", id)
		seen[id] = true
	}
}

func TestParseMessageIDRejectsOtherShapes(t *testing.T) {
	for _, bad := range []string{"", "01", "02" + "00000000000000000000000000000000", "01" + "0000000000000000000000000000000G", "id1,id2"} {
		_, err := ParseMessageID(bad)
		assert.True(t, errors.Is(err, ErrBadRequest), "%q: %v", bad, err)
	}
}

func FuzzParseMessageID(f *testing.F) {
	f.Add("010242AC1100021F2E0B5F3A1200000000")
	f.Add(NewMessageIDGenerator().Next())
	f.Add("")
	f.Add("01zz")
	f.Add("7F000001000078A5000000000000002A")
	f.Fuzz(func(t *testing.T, s string) {
		info, err := ParseMessageID(s)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// A parsed id re-encodes to itself (modulo hex case).
		g := newGenerator(info.MAC, info.PID)
		g.seq.Store(info.Sequence)
		again := g.next(info.Time)
		if !equalFoldASCII(again, s) {
			t.Fatalf("re-encoded %q as %q", s, again)
		}
	})
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 32
		}
		if 'a' <= y && y <= 'z' {
			y -= 32
		}
		if x != y {
			return false
		}
	}
	return true
}
