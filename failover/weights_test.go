package failover

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errBoom = errors.New("boom")

// newPicker builds a picker that is closed when the test ends.
func newPicker[T any](t testing.TB, rs []Resource[T], cfg Config[T]) *Picker[T] {
	t.Helper()
	p, err := New(rs, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func lookup[T any](t testing.TB, p *Picker[T], key string) *Handle[T] {
	t.Helper()
	h, ok := p.Lookup(key)
	require.True(t, ok, "key %q", key)
	return h
}

func failN[T any](p *Picker[T], h *Handle[T], n int) {
	for range n {
		p.Failure(h, errBoom)
	}
}

func succeedN[T any](p *Picker[T], h *Handle[T], n int) {
	for range n {
		p.Success(h, time.Millisecond)
	}
}

// noRecovery keeps down resources down for the length of a test, so weights
// only move through what the test reports.
func noRecovery[T any]() Config[T] { return Config[T]{Quarantine: -1} }

func TestFailureHalvesAndDropsToMinAfterSeven(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a"}}, noRecovery[string]())
	h := lookup(t, p, "a")
	require.Equal(t, 100.0, h.Weight(), "zero max weight means the default")

	want := []float64{50, 25, 12.5, 6.25, 3.125, 1.5625}
	for i, w := range want {
		p.Failure(h, errBoom)
		require.Equal(t, w, h.Weight(), "after failure %d", i+1)
		require.False(t, h.IsDown())
	}
	p.Failure(h, errBoom) // 0.78 is under 1% of max: straight to min
	require.Equal(t, 0.0, h.Weight())
	require.True(t, h.IsDown())
	p.Failure(h, errBoom)
	require.Equal(t, 0.0, h.Weight(), "a down resource stays at its floor")
}

func TestFailureNeverGoesBelowMinWeight(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a", MaxWeight: 10, MinWeight: 3}}, noRecovery[string]())
	h := lookup(t, p, "a")
	p.Failure(h, errBoom)
	require.Equal(t, 5.0, h.Weight())
	p.Failure(h, errBoom)
	require.Equal(t, 3.0, h.Weight(), "2.5 is below the min weight: clamp to it")
	require.True(t, h.IsDown())
}

func TestSuccessRestoresSlowlyAndFromMinByRecoverStep(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a"}}, noRecovery[string]())
	h := lookup(t, p, "a")

	p.Failure(h, errBoom)
	require.Equal(t, 50.0, h.Weight())
	p.Success(h, time.Millisecond)
	require.Equal(t, 51.0, h.Weight(), "a success adds 1% of max")
	succeedN(p, h, 48)
	require.InDelta(t, 99.0, h.Weight(), 1e-9)
	succeedN(p, h, 5)
	require.Equal(t, 100.0, h.Weight(), "capped at max")

	failN(p, h, 7)
	require.True(t, h.IsDown())
	p.Success(h, time.Millisecond)
	require.Equal(t, 10.0, h.Weight(), "from min a success adds 10% of max")
	require.False(t, h.IsDown())
	p.Success(h, time.Millisecond)
	require.Equal(t, 11.0, h.Weight(), "then 1% again")
}

func TestRecoverThresholdNeedsSuccessesInARow(t *testing.T) {
	cfg := noRecovery[string]()
	cfg.RecoverThreshold = 3
	p := newPicker(t, []Resource[string]{{Key: "a", MinWeight: 1}}, cfg)
	h := lookup(t, p, "a")
	p.Down(h, errBoom)
	require.Equal(t, 1.0, h.Weight())

	succeedN(p, h, 2)
	require.Equal(t, 1.0, h.Weight())
	p.Failure(h, errBoom) // breaks the streak
	succeedN(p, h, 2)
	require.Equal(t, 1.0, h.Weight())
	p.Success(h, time.Millisecond)
	require.Equal(t, 11.0, h.Weight())
}

func TestDownTakesResourceToMinAtOnce(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a", MaxWeight: 50, MinWeight: 2}}, noRecovery[string]())
	h := lookup(t, p, "a")
	p.Down(h, errBoom)
	require.Equal(t, 2.0, h.Weight())
	require.True(t, h.IsDown())
}

func TestCanceledCallIsNotHeldAgainstTheResource(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a"}}, noRecovery[string]())
	h := lookup(t, p, "a")
	p.Failure(h, context.Canceled)
	p.Failure(h, errors.Join(errBoom, context.Canceled))
	require.Equal(t, 100.0, h.Weight())
	p.Failure(h, context.DeadlineExceeded)
	require.Equal(t, 50.0, h.Weight(), "a deadline is the resource being slow")
}

func TestSlowSuccessCountsAsFailure(t *testing.T) {
	cfg := noRecovery[string]()
	cfg.SlowThreshold = 100 * time.Millisecond
	p := newPicker(t, []Resource[string]{{Key: "a"}}, cfg)
	h := lookup(t, p, "a")
	p.Success(h, 99*time.Millisecond)
	require.Equal(t, 100.0, h.Weight())
	p.Success(h, 100*time.Millisecond)
	require.Equal(t, 50.0, h.Weight())
}

func TestInitWeightGivesSlowStart(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a", InitWeight: 20}}, noRecovery[string]())
	h := lookup(t, p, "a")
	require.Equal(t, 20.0, h.Weight())
	p.Success(h, 0)
	require.Equal(t, 21.0, h.Weight())
}

func TestWeightListenerHearsEveryChange(t *testing.T) {
	type change struct {
		key      string
		old, new float64
	}
	var mu sync.Mutex
	var got []change
	cfg := noRecovery[string]()
	cfg.WeightListener = func(key string, old, nw float64) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, change{key, old, nw})
	}
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b"}}, cfg)
	a := lookup(t, p, "a")
	p.Failure(a, errBoom)
	p.Success(a, 0)
	p.Success(lookup(t, p, "b"), 0) // healthy stays healthy: no change to report
	require.Equal(t, []change{{"a", 100, 50}, {"a", 50, 51}}, got)
}

func TestInvalidResourcesAndConfig(t *testing.T) {
	bad := map[string][]Resource[int]{
		"empty key":     {{Key: ""}},
		"duplicate key": {{Key: "a"}, {Key: "a"}},
		"negative max":  {{Key: "a", MaxWeight: -1}},
		"min above max": {{Key: "a", MaxWeight: 10, MinWeight: 11}},
		"min at max":    {{Key: "a", MaxWeight: 10, MinWeight: 10}},
		"init below":    {{Key: "a", MinWeight: 5, InitWeight: 4}},
		"init above":    {{Key: "a", MaxWeight: 10, InitWeight: 11}},
	}
	for name, rs := range bad {
		_, err := New(rs, Config[int]{})
		assert.ErrorIs(t, err, ErrInvalidResource, name)
	}
	badCfg := map[string]Config[int]{
		"failure factor 1":     {FailureFactor: 1},
		"down ratio 1":         {DownRatio: 1},
		"success step 2":       {SuccessStep: 2},
		"recover step -1":      {RecoverStep: -1},
		"overprovision 0.5":    {OverprovisionFactor: 0.5},
		"negative slow":        {SlowThreshold: -time.Second},
		"negative interval":    {CheckInterval: -time.Second},
		"negative threshold":   {RecoverThreshold: -1},
		"threshold over int32": {RecoverThreshold: math.MaxInt32 + 1},
	}
	for name, cfg := range badCfg {
		_, err := New([]Resource[int]{{Key: "a"}}, cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}
