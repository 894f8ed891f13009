package failover

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUpdateKeepsHealthOfResourcesThatStay(t *testing.T) {
	p := newPicker(t, []Resource[string]{
		{Key: "a", Value: "a-v1"},
		{Key: "b", Value: "b-v1"},
		{Key: "c", Value: "c-v1"},
		{Key: "gone", Value: "gone-v1"},
	}, noRecovery[string]())
	oldA, oldGone := lookup(t, p, "a"), lookup(t, p, "gone")
	failN(p, oldA, 2)              // a at 25
	failN(p, lookup(t, p, "b"), 1) // b at 50 = half health
	failN(p, lookup(t, p, "c"), 7) // c down
	require.Equal(t, 25.0, oldA.Weight())

	require.NoError(t, p.Update([]Resource[string]{
		{Key: "new", Value: "new-v1", InitWeight: 40},
		{Key: "c", Value: "c-v2", MaxWeight: 300},
		{Key: "b", Value: "b-v2", MaxWeight: 200, Priority: 1},
		{Key: "a", Value: "a-v2"},
	}))

	a := lookup(t, p, "a")
	require.Equal(t, "a-v2", a.Value(), "the value comes from the new set")
	require.Equal(t, 25.0, a.Weight(), "unchanged weights: same health")
	b := lookup(t, p, "b")
	require.Equal(t, 100.0, b.Weight(), "half health stays half health under a new max")
	require.Equal(t, 1, b.Priority())
	c := lookup(t, p, "c")
	require.True(t, c.IsDown(), "down stays down")
	require.Equal(t, 40.0, lookup(t, p, "new").Weight(), "new keys start at their init weight")
	_, ok := p.Lookup("gone")
	require.False(t, ok)

	// The old handle of a key that stays reports into the same health.
	p.Success(oldA, 0)
	require.Equal(t, 26.0, a.Weight())
	// Reports on a removed key are ignored, and it is never picked.
	p.Failure(oldGone, errBoom)
	require.Equal(t, 100.0, oldGone.Weight())
	got := shares(t, p)
	require.Zero(t, got["gone"])
	// Group 0 (new 40, c 0 of 300, a 26) has health 66/500, so share
	// 0.1848; group 1 (b at half) 0.7; together under 1, so normalized.
	g0, g1 := 66.0/500*1.4, 0.7
	require.InDelta(t, g1/(g0+g1), got["b"], tol)
	require.InDelta(t, g0/(g0+g1)*40/66, got["new"], tol)
	require.Zero(t, got["c"])

	// Excluding by an old handle still excludes the key.
	for range 1000 {
		h, err := p.Pick(oldA)
		require.NoError(t, err)
		require.NotEqual(t, "a", h.Key())
	}

	keys := []string{}
	for _, h := range p.Handles() {
		keys = append(keys, h.Key())
	}
	require.Equal(t, []string{"new", "c", "a", "b"}, keys, "pick order: by priority, input order within")
}

func TestInvalidUpdateChangesNothing(t *testing.T) {
	p := newPicker(t, []Resource[int]{{Key: "a"}, {Key: "b"}}, noRecovery[int]())
	a := lookup(t, p, "a")
	failN(p, a, 1)
	err := p.Update([]Resource[int]{{Key: "a", MaxWeight: 10}, {Key: "x", MinWeight: -1}})
	require.ErrorIs(t, err, ErrInvalidResource)
	require.Equal(t, 50.0, a.Weight())
	require.Equal(t, 100.0, a.MaxWeight())
	require.Len(t, p.Handles(), 2)
	_, ok := p.Lookup("b")
	assert.True(t, ok)
}

func TestUpdateToEmptyAndBack(t *testing.T) {
	p := newPicker(t, []Resource[int]{{Key: "a", Value: 1}}, noRecovery[int]())
	require.NoError(t, p.Update(nil))
	_, err := p.Pick()
	require.ErrorIs(t, err, ErrNoResource)
	require.NoError(t, p.Update([]Resource[int]{{Key: "a", Value: 2}}))
	h, err := p.Pick()
	require.NoError(t, err)
	require.Equal(t, 2, h.Value())
	require.Equal(t, 100.0, h.Weight(), "a key that left and came back starts afresh")
}
