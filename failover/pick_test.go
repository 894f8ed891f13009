package failover

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const samples = 100_000

// shares picks samples times and returns each key's share of the picks.
func shares[T any](t testing.TB, p *Picker[T], exclude ...*Handle[T]) map[string]float64 {
	t.Helper()
	counts := map[string]int{}
	for range samples {
		h, err := p.Pick(exclude...)
		require.NoError(t, err)
		counts[h.Key()]++
		p.Release(h)
	}
	out := map[string]float64{}
	for k, c := range counts {
		out[k] = float64(c) / samples
	}
	return out
}

// Bounds are generous: with 100k samples one standard deviation of a share
// is at most 0.0016, so 0.02 is more than ten of them.
const tol = 0.02

func TestDistributionFollowsWeights(t *testing.T) {
	p := newPicker(t, []Resource[int]{
		{Key: "a"}, {Key: "b"}, {Key: "c"}, {Key: "d", MaxWeight: 300},
	}, noRecovery[int]())
	got := shares(t, p)
	assert.InDelta(t, 0.5, got["d"], tol)
	for _, k := range []string{"a", "b", "c"} {
		assert.InDelta(t, 1.0/6, got[k], tol, k)
	}

	// Degrade b to 50 and c to 25: shares follow current weights.
	failN(p, lookup(t, p, "b"), 1)
	failN(p, lookup(t, p, "c"), 2)
	got = shares(t, p)
	total := 100.0 + 50 + 25 + 300
	assert.InDelta(t, 100/total, got["a"], tol)
	assert.InDelta(t, 50/total, got["b"], tol)
	assert.InDelta(t, 25/total, got["c"], tol)
	assert.InDelta(t, 300/total, got["d"], tol)
}

func twoGroups(t testing.TB, cfg Config[string]) *Picker[string] {
	return newPicker(t, []Resource[string]{
		{Key: "remote-1", Priority: 1}, {Key: "local-1"}, {Key: "remote-2", Priority: 1}, {Key: "local-2"},
	}, cfg)
}

func groupShares(t testing.TB, p *Picker[string], exclude ...*Handle[string]) (local, remote float64) {
	got := shares(t, p, exclude...)
	return got["local-1"] + got["local-2"], got["remote-1"] + got["remote-2"]
}

func TestHealthyPreferredGroupTakesAllTraffic(t *testing.T) {
	p := twoGroups(t, noRecovery[string]())
	local, remote := groupShares(t, p)
	require.Equal(t, 1.0, local)
	require.Equal(t, 0.0, remote)

	// Overprovisioning: at 75% health (one local resource at half weight)
	// the group still takes everything, as 0.75 x 1.4 >= 1.
	failN(p, lookup(t, p, "local-1"), 1)
	local, _ = groupShares(t, p)
	require.Equal(t, 1.0, local)
}

func TestPrioritySpillsByHealth(t *testing.T) {
	p := twoGroups(t, noRecovery[string]())
	// local-1 down, local-2 at full: health 0.5 -> share 0.7.
	failN(p, lookup(t, p, "local-1"), 7)
	local, remote := groupShares(t, p)
	assert.InDelta(t, 0.7, local, tol)
	assert.InDelta(t, 0.3, remote, tol)

	// local-2 at half too: health 0.25 -> share 0.35.
	failN(p, lookup(t, p, "local-2"), 1)
	local, remote = groupShares(t, p)
	assert.InDelta(t, 0.35, local, tol)
	assert.InDelta(t, 0.65, remote, tol)
}

func TestAllGroupsDegradedSplitInProportion(t *testing.T) {
	p := twoGroups(t, noRecovery[string]())
	// Each group at health 0.25 (one resource down, one at half): shares
	// 0.35 and 0.35 add to 0.7, normalized to a half each.
	for _, k := range []string{"local-1", "remote-1"} {
		failN(p, lookup(t, p, k), 7)
	}
	for _, k := range []string{"local-2", "remote-2"} {
		failN(p, lookup(t, p, k), 1)
	}
	local, remote := groupShares(t, p)
	assert.InDelta(t, 0.5, local, tol)
	assert.InDelta(t, 0.5, remote, tol)
}

func TestDeadGroupMovesAllTrafficAtOnce(t *testing.T) {
	p := twoGroups(t, noRecovery[string]())
	l1, l2 := lookup(t, p, "local-1"), lookup(t, p, "local-2")
	// A handful of consecutive failures each, as a cluster going dark under
	// load produces within milliseconds.
	failN(p, l1, 7)
	failN(p, l2, 7)
	local, remote := groupShares(t, p)
	require.Equal(t, 0.0, local, "no pick may land on the dead group")
	require.Equal(t, 1.0, remote)

	// It comes back gradually once it succeeds again.
	p.Success(l1, 0)
	p.Success(l2, 0)
	local, _ = groupShares(t, p)
	assert.InDelta(t, 0.14, local, tol, "health 0.1 x 1.4")
}

func TestSpillOnlyWhenDead(t *testing.T) {
	cfg := noRecovery[string]()
	cfg.SpillOnlyWhenDead = true
	p := twoGroups(t, cfg)
	l1, l2 := lookup(t, p, "local-1"), lookup(t, p, "local-2")
	failN(p, l1, 7)
	failN(p, l2, 3)
	local, _ := groupShares(t, p)
	require.Equal(t, 1.0, local, "a sick but living group keeps all traffic")
	got := shares(t, p)
	require.Equal(t, 1.0, got["local-2"])

	failN(p, l2, 4)
	local, remote := groupShares(t, p)
	require.Equal(t, 0.0, local)
	require.Equal(t, 1.0, remote)
}

func TestMinWeightKeepsResourceEligible(t *testing.T) {
	p := newPicker(t, []Resource[string]{
		{Key: "a", MinWeight: 5}, {Key: "b"},
	}, noRecovery[string]())
	failN(p, lookup(t, p, "a"), 10)
	got := shares(t, p)
	assert.InDelta(t, 5.0/105, got["a"], tol)
	assert.Greater(t, got["a"], 0.0, "a down resource keeps its trickle")
}

func TestExclusionSkipsTriedTargets(t *testing.T) {
	p := twoGroups(t, noRecovery[string]())
	l1, l2 := lookup(t, p, "local-1"), lookup(t, p, "local-2")

	got := shares(t, p, l1)
	require.Equal(t, 1.0, got["local-2"], "the other local resource, not the remote group")

	// Excluded resources are absent from their group: with both local ones
	// tried the retry goes to the remote group.
	local, remote := groupShares(t, p, l1, l2)
	require.Equal(t, 0.0, local)
	require.Equal(t, 1.0, remote)

	// PickExcluding is the same with a slice; nil entries are ignored.
	tried := []*Handle[string]{nil, l1, l2, lookup(t, p, "remote-1")}
	for range 100 {
		h, err := p.PickExcluding(tried)
		require.NoError(t, err)
		require.Equal(t, "remote-2", h.Key())
	}

	tried = append(tried, lookup(t, p, "remote-2"))
	_, err := p.PickExcluding(tried)
	require.ErrorIs(t, err, ErrNoResource)
	assert.ErrorContains(t, err, "all 4 resources were excluded", "the error tells a retry loop why")
}

func TestEverythingDeadStillReturnsPreferredResource(t *testing.T) {
	p := twoGroups(t, noRecovery[string]())
	for _, h := range p.Handles() {
		failN(p, h, 7)
		require.True(t, h.IsDown())
	}
	got := shares(t, p)
	assert.InDelta(t, 0.5, got["local-1"], tol)
	assert.InDelta(t, 0.5, got["local-2"], tol)

	// With the local group tried, the last resort is the remote group.
	local, remote := groupShares(t, p, lookup(t, p, "local-1"), lookup(t, p, "local-2"))
	require.Equal(t, 0.0, local)
	require.Equal(t, 1.0, remote)
}

func TestEmptySetHasNoResource(t *testing.T) {
	p := newPicker(t, nil, Config[int]{})
	_, err := p.Pick()
	require.ErrorIs(t, err, ErrNoResource)
	assert.ErrorContains(t, err, "resource set is empty", "the error says how to mend it")
}

func TestInflightAwareFavoursLessLoadedResource(t *testing.T) {
	cfg := noRecovery[string]()
	cfg.InflightAware = true
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b"}}, cfg)
	a, b := lookup(t, p, "a"), lookup(t, p, "b")

	// Three picks of a still outstanding: its effective weight is 100/4.
	var held []*Handle[string]
	for range 3 {
		h, err := p.Pick(b)
		require.NoError(t, err)
		require.Same(t, a, h)
		held = append(held, h)
	}
	require.EqualValues(t, 3, a.Inflight())
	got := shares(t, p)
	assert.InDelta(t, 0.2, got["a"], tol)
	assert.InDelta(t, 0.8, got["b"], tol)

	for _, h := range held {
		p.Success(h, 0)
	}
	require.EqualValues(t, 0, a.Inflight())
	p.Release(a) // one report too many does not go negative
	require.EqualValues(t, 0, a.Inflight())
	got = shares(t, p)
	assert.InDelta(t, 0.5, got["a"], tol)
}

func TestPickDoesNotAllocate(t *testing.T) {
	p := twoGroups(t, noRecovery[string]())
	l1 := lookup(t, p, "local-1")
	failN(p, l1, 2) // exercise the spill path too
	allocs := testing.AllocsPerRun(1000, func() {
		h, _ := p.Pick()
		p.Success(h, 0)
		_, _ = p.Pick(l1)
	})
	require.Zero(t, allocs)
}

// A retry that has tried the up resources gets ErrNoResource, not a down
// one: the down resources are left to their probes while there is an up
// one to come back to. Only with nothing up at all does a down one count
// as the last resort.
func TestDownLeftToProbesWhileTriedOneIsUp(t *testing.T) {
	p := twoGroups(t, noRecovery[string]())
	l1 := lookup(t, p, "local-1")
	for _, k := range []string{"local-2", "remote-1", "remote-2"} {
		h := lookup(t, p, k)
		failN(p, h, 7)
		require.True(t, h.IsDown())
	}
	for range 100 {
		h, err := p.Pick()
		require.NoError(t, err)
		require.Equal(t, "local-1", h.Key(), "the one up resource takes every first pick")
	}
	_, err := p.PickExcluding([]*Handle[string]{l1})
	require.ErrorIs(t, err, ErrNoResource)
	assert.ErrorContains(t, err, "1 already tried are up")

	// local-1 goes down too: a retry after it tries a down one.
	failN(p, l1, 7)
	require.True(t, l1.IsDown())
	h, err := p.PickExcluding([]*Handle[string]{l1})
	require.NoError(t, err)
	require.Equal(t, "local-2", h.Key(), "the last resort is the preferred group")
}
