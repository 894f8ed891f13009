package failover

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// Reconfigure retunes a live picker: the resources keep their health and
// their handles and metric series, and the new tuning applies to the next
// report.
func TestReconfigureKeepsHealthHandlesAndSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cfg := noRecovery[string]()
	cfg.Registerer = reg
	cfg.Name = "orders"
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b"}}, cfg)
	a, b := lookup(t, p, "a"), lookup(t, p, "b")
	failN(p, a, 7)
	require.True(t, a.IsDown())
	series, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)

	cfg.FailureFactor = 0.25
	require.NoError(t, p.Reconfigure(cfg))
	require.True(t, a.IsDown(), "health carries over")
	p.Failure(b, errBoom)
	require.Equal(t, 25.0, b.Weight(), "the new failure factor applies")
	require.Equal(t, 25.0, testutil.ToFloat64(p.met.weight.WithLabelValues("orders", "", "b")))
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Equal(t, series, n)
}

// Invalid tuning, or a change of InflightAware, changes nothing.
func TestReconfigureRefusesBadTuning(t *testing.T) {
	p := newPicker(t, []Resource[int]{{Key: "a"}}, noRecovery[int]())
	a := lookup(t, p, "a")
	require.ErrorIs(t, p.Reconfigure(Config[int]{FailureFactor: 2}), ErrInvalidConfig)
	require.ErrorIs(t, p.Reconfigure(Config[int]{InflightAware: true}), ErrInvalidConfig)
	require.ErrorIs(t, Config[int]{SuccessStep: -1}.Validate(), ErrInvalidConfig)
	p.Failure(a, errBoom)
	require.Equal(t, 50.0, a.Weight(), "the default factor is still in force")
}

// A shorter probe interval applies at once, not after a round of the old
// one; a checker turned on by Reconfigure probes resources already down.
func TestReconfigureProbing(t *testing.T) {
	pl := newProbeLog()
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b"}}, Config[string]{
		Checker:       pl.check,
		CheckInterval: time.Hour,
	})
	a := lookup(t, p, "a")
	failN(p, a, 7)
	require.True(t, a.IsDown())
	pl.setHealthy("a")
	require.NoError(t, p.Reconfigure(Config[string]{Checker: pl.check, CheckInterval: 10 * time.Millisecond}))
	require.Eventually(t, func() bool { return !a.IsDown() }, waitFor, tick)

	q := newPicker(t, []Resource[string]{{Key: "c"}}, Config[string]{Quarantine: -1})
	c := lookup(t, q, "c")
	failN(q, c, 7)
	require.True(t, c.IsDown())
	pl.setHealthy("c")
	require.NoError(t, q.Reconfigure(Config[string]{Quarantine: -1, Checker: pl.check, CheckInterval: 10 * time.Millisecond}))
	require.Eventually(t, func() bool { return !c.IsDown() }, waitFor, tick)
}

// Weights are bounded so that a group's sum stays finite: a huge max
// weight is refused instead of skewing every pick.
func TestMaxWeightIsBounded(t *testing.T) {
	_, err := New([]Resource[int]{{Key: "a", MaxWeight: 1.5e308}, {Key: "b", MaxWeight: 1e308}}, Config[int]{})
	require.ErrorIs(t, err, ErrInvalidResource)
	p := newPicker(t, []Resource[int]{{Key: "a", MaxWeight: MaxWeightLimit}, {Key: "b", MaxWeight: MaxWeightLimit}}, noRecovery[int]())
	got := shares(t, p)
	require.InDelta(t, 0.5, got["a"], tol)
}
