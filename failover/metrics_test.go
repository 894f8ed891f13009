package failover

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestMetricsFollowWeights(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cfg := noRecovery[string]()
	cfg.Registerer = reg
	cfg.Name = "orders"
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b", InitWeight: 30}}, cfg)

	// A second picker on the same registry shares the collectors.
	cfg2 := cfg
	cfg2.Name = "payments"
	q := newPicker(t, []Resource[string]{{Key: "a"}}, cfg2)

	m := p.met
	require.Equal(t, 100.0, testutil.ToFloat64(m.weight.WithLabelValues("orders", "", "a")))
	require.Equal(t, 30.0, testutil.ToFloat64(m.weight.WithLabelValues("orders", "", "b")))

	a := lookup(t, p, "a")
	p.Failure(a, errBoom)
	require.Equal(t, 50.0, testutil.ToFloat64(m.weight.WithLabelValues("orders", "", "a")))
	require.Equal(t, 100.0, testutil.ToFloat64(m.weight.WithLabelValues("payments", "", "a")))
	failN(p, a, 6)
	require.Equal(t, 0.0, testutil.ToFloat64(m.weight.WithLabelValues("orders", "", "a")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.downs.WithLabelValues("orders", "", "a")))

	// Removing a key removes its series.
	require.NoError(t, p.Update([]Resource[string]{{Key: "a"}}))
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Equal(t, 4, n, "a weight and a down series for orders/a and payments/a")

	// Close removes the picker's series.
	q.Close()
	n, err = testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// Two failures race: A halves 100 to 50, B halves 50 to 25, and A's
// bookkeeping runs last. The gauge must end on the weight in force.
func TestWeightGaugeNotLeftStaleByReorderedReports(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := noRecovery[string]()
	cfg.Registerer = reg
	p := newPicker(t, []Resource[string]{{Key: "a"}}, cfg)
	a := lookup(t, p, "a")
	p.Failure(a, errBoom)
	p.Failure(a, errBoom)
	require.Equal(t, 25.0, a.Weight())
	p.changed(a.n, false, false, 100, 50, errBoom) // A's late bookkeeping
	require.Equal(t, 25.0, testutil.ToFloat64(p.met.weight.WithLabelValues("", "", "a")))
}

// A resource's cluster and endpoint are separate labels; a pair named twice
// is refused, and an Update that moves a key's place moves its series.
func TestMetricsClusterAndEndpointLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := noRecovery[string]()
	cfg.Registerer = reg
	cfg.Name = "producer/orders"
	p := newPicker(t, []Resource[string]{
		{Key: "dc1/h1:1", Cluster: "dc1", Endpoint: "h1:1"},
		{Key: "dc2/h2:1", Cluster: "dc2", Endpoint: "h2:1", InitWeight: 30},
	}, cfg)
	require.Equal(t, 30.0, testutil.ToFloat64(p.met.weight.WithLabelValues("producer/orders", "dc2", "h2:1")))

	err := p.Update([]Resource[string]{{Key: "x", Cluster: "dc1", Endpoint: "h1:1"}, {Key: "y", Cluster: "dc1", Endpoint: "h1:1"}})
	require.ErrorIs(t, err, ErrInvalidResource)

	require.NoError(t, p.Update([]Resource[string]{{Key: "dc1/h1:1", Cluster: "dc1", Endpoint: "h1:2"}}))
	n, err := testutil.GatherAndCount(reg, "twinmq_failover_weight")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 100.0, testutil.ToFloat64(p.met.weight.WithLabelValues("producer/orders", "dc1", "h1:2")))
}
