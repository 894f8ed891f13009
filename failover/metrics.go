package failover

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/internal/promreg"
)

// metrics are the collectors of a Picker on the caller's Registerer. Several
// pickers (one per logic topic, say) share one set of collectors on a
// registry, told apart by the "picker" label.
type metrics struct {
	weight *prometheus.GaugeVec
	downs  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	weight := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "twinmq",
		Subsystem: "failover",
		Name:      "weight",
		Help:      "Current health weight of a failover resource.",
	}, []string{"picker", "cluster", "endpoint"})
	downs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "twinmq",
		Subsystem: "failover",
		Name:      "down_total",
		Help:      "Times a failover resource fell to its minimum weight.",
	}, []string{"picker", "cluster", "endpoint"})
	var err error
	if weight, err = register(reg, weight); err != nil {
		return nil, err
	}
	if downs, err = register(reg, downs); err != nil {
		return nil, err
	}
	return &metrics{weight: weight, downs: downs}, nil
}

// register registers c, or returns the collector of the same description a
// picker registered before (see promreg).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	c, err := promreg.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("registering metrics: %w: %w", ErrInvalidConfig, err)
	}
	return c, nil
}

// attach gives n its series and sets them to its current state.
func (m *metrics) attach(picker string, n *node) {
	if m == nil {
		return
	}
	n.gauge = m.weight.WithLabelValues(picker, n.place[0], n.place[1])
	n.downs = m.downs.WithLabelValues(picker, n.place[0], n.place[1])
	n.gauge.Set(n.load())
}

// place is the cluster and endpoint labels of r's series.
func (r *Resource[T]) place() [2]string {
	if r.Cluster == "" && r.Endpoint == "" {
		return [2]string{"", r.Key}
	}
	return [2]string{r.Cluster, r.Endpoint}
}

// detach removes n's series once its key left the set (or its place
// changed).
func (m *metrics) detach(picker string, n *node) {
	if m == nil {
		return
	}
	m.weight.DeleteLabelValues(picker, n.place[0], n.place[1])
	m.downs.DeleteLabelValues(picker, n.place[0], n.place[1])
}
