package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func counter(help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: help}, []string{"who"})
}

// A shared collector registered twice is one collector: the second
// registration takes the first one over.
func TestRegisterSharesTheCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := Register(reg, counter("h"))
	require.NoError(t, err)
	b, err := Register(reg, counter("h"))
	require.NoError(t, err)
	require.Same(t, a, b)
	b.WithLabelValues("one").Inc()
	require.Equal(t, 1.0, testutil.ToFloat64(a.WithLabelValues("one")))

	_, err = Register(reg, counter("other help"))
	require.ErrorIs(t, err, ErrConflict, "a name taken with another help")

	c := counter("h")
	got, err := Register(nil, c)
	require.NoError(t, err)
	require.Same(t, c, got, "no registry: the collector is used unregistered")
}

// An instance's own collectors are refused to a second instance, all or
// none, and come free at Unregister.
func TestOwnRefusesADuplicate(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := Own(reg, counter("h"))
	require.NoError(t, err)

	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "y", Help: "y"})
	_, err = Own(reg, other, counter("h"))
	require.ErrorIs(t, err, ErrDuplicate)
	require.NoError(t, reg.Register(other), "a refused Own leaves nothing registered")
	reg.Unregister(other)

	_, err = Own(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "other"}))
	require.ErrorIs(t, err, ErrConflict)

	first.Unregister()
	first.Unregister()
	second, err := Own(reg, counter("h"))
	require.NoError(t, err, "Unregister frees the names")
	second.Unregister()

	none, err := Own(nil, counter("h"))
	require.NoError(t, err)
	none.Unregister()
	var nilSet *Set
	nilSet.Unregister()
}
