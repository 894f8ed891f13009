package driver

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/internal/promreg"
)

// metrics are the driver's Prometheus collectors. A nil *metrics (no
// Registerer configured) records nothing.
type metrics struct {
	calls      *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	reconnects prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "driver", Name: "rpc_total",
			Help: "RocketMQ RPCs by method and outcome class.",
		}, []string{"rpc", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "twinmq", Subsystem: "driver", Name: "rpc_duration_seconds",
			Help:    "Latency of RocketMQ RPCs (receives include long polling).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 17),
		}, []string{"rpc"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "driver", Name: "telemetry_reconnects_total",
			Help: "Telemetry streams reopened after an error.",
		}),
	}
	var err error
	m.calls, err = register(reg, m.calls)
	if err != nil {
		return nil, err
	}
	m.latency, err = register(reg, m.latency)
	if err != nil {
		return nil, err
	}
	m.reconnects, err = register(reg, m.reconnects)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same name, so several Clients can share one Registerer (see
// promreg).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	c, err := promreg.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return c, nil
}

func (m *metrics) observe(rpc string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.latency.WithLabelValues(rpc).Observe(time.Since(start).Seconds())
	m.calls.WithLabelValues(rpc, resultLabel(err)).Inc()
}

func (m *metrics) telemetryReconnect() {
	if m == nil {
		return
	}
	m.reconnects.Inc()
}

func resultLabel(err error) string {
	if err == nil {
		return "ok"
	}
	var de *Error
	if errors.As(err, &de) && de.class != nil {
		return de.class.Error()
	}
	return "canceled"
}
