package driver

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/internal/promreg"
)

// metrics are a Client's view of the driver's Prometheus collectors,
// curried with its cluster (Config.Cluster) and its client id, so that the
// Clients sharing a registry share the collectors and Close removes exactly
// its own series. A nil *metrics (no Registerer configured) records
// nothing.
type metrics struct {
	calls      *prometheus.CounterVec // rpc, result
	latency    prometheus.ObserverVec // rpc
	reconnects *prometheus.CounterVec // no label left
	shared     []deleter              // the uncurried collectors
	own        prometheus.Labels      // cluster and client
}

type deleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

func newMetrics(reg prometheus.Registerer, cluster, clientID string) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	own := []string{"cluster", "client"}
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "twinmq", Subsystem: "driver", Name: "rpc_total",
		Help: "RocketMQ RPCs by cluster, client, method and outcome class.",
	}, append(own, "rpc", "result"))
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "twinmq", Subsystem: "driver", Name: "rpc_duration_seconds",
		Help:    "Latency of RocketMQ RPCs by cluster, client and method (receives include long polling).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 17),
	}, append(own, "rpc"))
	reconnects := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "twinmq", Subsystem: "driver", Name: "telemetry_reconnects_total",
		Help: "Telemetry streams reopened after an error, by cluster and client.",
	}, own)
	var err error
	if calls, err = register(reg, calls); err != nil {
		return nil, err
	}
	if latency, err = register(reg, latency); err != nil {
		return nil, err
	}
	if reconnects, err = register(reg, reconnects); err != nil {
		return nil, err
	}
	labels := prometheus.Labels{"cluster": cluster, "client": clientID}
	m := &metrics{shared: []deleter{calls, latency, reconnects}, own: labels}
	if m.calls, err = calls.CurryWith(labels); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if m.latency, err = latency.CurryWith(labels); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if m.reconnects, err = reconnects.CurryWith(labels); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return m, nil
}

// remove deletes the Client's series (Close).
func (m *metrics) remove() {
	if m == nil {
		return
	}
	for _, d := range m.shared {
		d.DeletePartialMatch(m.own)
	}
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
	m.reconnects.WithLabelValues().Inc()
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
