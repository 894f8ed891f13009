package failover

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Liveness waits are generous: the machine may be busy.
const (
	waitFor = 5 * time.Second
	tick    = 5 * time.Millisecond
)

// probeLog records the keys a checker was called with, and answers healthy
// for the keys marked so.
type probeLog struct {
	mu      sync.Mutex
	calls   map[string]int
	healthy map[string]bool
}

func newProbeLog() *probeLog {
	return &probeLog{calls: map[string]int{}, healthy: map[string]bool{}}
}

func (l *probeLog) check(ctx context.Context, h *Handle[string]) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[h.Key()]++
	if l.healthy[h.Key()] {
		return nil
	}
	return errBoom
}

func (l *probeLog) setHealthy(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.healthy[key] = true
}

func (l *probeLog) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[key]
}

func TestCheckerProbesDownResourceBack(t *testing.T) {
	pl := newProbeLog()
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b"}}, Config[string]{
		Checker:       pl.check,
		CheckInterval: 10 * time.Millisecond,
	})
	a := lookup(t, p, "a")
	failN(p, a, 7)
	require.True(t, a.IsDown())

	// Probed while down, and the failing probes keep it down.
	require.Eventually(t, func() bool { return pl.count("a") >= 3 }, waitFor, tick)
	require.True(t, a.IsDown())
	require.Zero(t, pl.count("b"), "healthy resources are never probed")

	pl.setHealthy("a")
	require.Eventually(t, func() bool { return !a.IsDown() }, waitFor, tick)
	require.GreaterOrEqual(t, a.Weight(), 10.0)

	// Once nothing is down the round stops: no more probes.
	require.Eventually(t, func() bool {
		p.maintMu.Lock()
		defer p.maintMu.Unlock()
		return !p.running
	}, waitFor, tick)
	n := pl.count("a")
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, n, pl.count("a"))

	// And it starts again on the next fall.
	failN(p, a, 7)
	require.Eventually(t, func() bool { return pl.count("a") > n }, waitFor, tick)
}

func TestCheckerGetsTimeoutContext(t *testing.T) {
	var sawDeadline atomic.Bool
	p := newPicker(t, []Resource[string]{{Key: "a"}}, Config[string]{
		CheckInterval: 10 * time.Millisecond,
		CheckTimeout:  20 * time.Millisecond,
		Checker: func(ctx context.Context, h *Handle[string]) error {
			<-ctx.Done()
			sawDeadline.Store(true)
			return ctx.Err()
		},
	})
	p.Down(lookup(t, p, "a"), errBoom)
	require.Eventually(t, sawDeadline.Load, waitFor, tick)
	require.True(t, lookup(t, p, "a").IsDown())
}

func TestQuarantineReleasesOnProbation(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b"}}, Config[string]{
		CheckInterval: 5 * time.Millisecond,
		Quarantine:    30 * time.Millisecond,
	})
	a := lookup(t, p, "a")
	failN(p, a, 7)
	require.True(t, a.IsDown())
	require.Eventually(t, func() bool { return !a.IsDown() }, waitFor, tick)
	require.Equal(t, 10.0, a.Weight(), "released at min + 10% of max")

	// On probation the first failure takes it straight down again...
	p.Failure(a, errBoom)
	require.True(t, a.IsDown())

	// ...while after a confirming success failures halve as usual.
	require.Eventually(t, func() bool { return !a.IsDown() }, waitFor, tick)
	p.Success(a, 0)
	require.Equal(t, 11.0, a.Weight())
	p.Failure(a, errBoom)
	require.Equal(t, 5.5, a.Weight())
}

func TestNegativeQuarantineKeepsDownUntilSuccess(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a", MinWeight: 1}}, Config[string]{
		CheckInterval: 5 * time.Millisecond,
		Quarantine:    -1,
	})
	a := lookup(t, p, "a")
	p.Down(a, errBoom)
	time.Sleep(50 * time.Millisecond)
	require.True(t, a.IsDown())
	p.maintMu.Lock()
	require.False(t, p.running, "no round without a checker or quarantine")
	p.maintMu.Unlock()
	// The trickle of real picks brings it back.
	p.Success(a, 0)
	require.False(t, a.IsDown())
}

func TestInitiallyDownResourceIsProbed(t *testing.T) {
	pl := newProbeLog()
	pl.setHealthy("a")
	p := newPicker(t, []Resource[string]{{Key: "a", MinWeight: 1, InitWeight: 1}}, Config[string]{
		Checker:       pl.check,
		CheckInterval: 5 * time.Millisecond,
	})
	a := lookup(t, p, "a")
	require.Eventually(t, func() bool { return !a.IsDown() }, waitFor, tick)
}

func TestCloseStopsProbing(t *testing.T) {
	pl := newProbeLog()
	p, err := New([]Resource[string]{{Key: "a"}}, Config[string]{
		Checker:       pl.check,
		CheckInterval: 5 * time.Millisecond,
	})
	require.NoError(t, err)
	p.Down(lookup(t, p, "a"), errBoom)
	require.Eventually(t, func() bool { return pl.count("a") > 0 }, waitFor, tick)
	p.Close()
	n := pl.count("a")
	time.Sleep(30 * time.Millisecond)
	require.Equal(t, n, pl.count("a"))
	p.Close() // idempotent

	// Picks and reports still work.
	h, err := p.Pick()
	require.NoError(t, err)
	p.Success(h, 0)
}

// A fall and a concurrent recovery each do their bookkeeping after their
// weight CAS, so a resource can end up down with downAt cleared. The round
// must still start its quarantine, or the resource is never released.
func TestQuarantineStartsForDownResourceWithoutStartTime(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b"}}, Config[string]{
		CheckInterval: time.Hour, // rounds run only when the test calls them
		Quarantine:    time.Nanosecond,
	})
	a := lookup(t, p, "a")
	failN(p, a, 7)
	require.True(t, a.IsDown())
	a.n.downAt.Store(0) // the interleaving: the recovery's clear came last

	p.round()
	time.Sleep(time.Millisecond)
	p.round()
	require.False(t, a.IsDown(), "released after its quarantine")
}
