package producer

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/internal/promreg"
)

// Result label values of twinmq_producer_sends_total.
const (
	resultOK      = "ok"
	resultError   = "error"
	resultRetried = "retried"
)

// metrics holds the producer's own collectors. Batch sizes, flush reasons
// and buffered bytes come from the batch accumulator (twinmq_batch_*),
// failover weights from the pickers (twinmq_failover_weight, one picker per
// logic topic named "producer/<topic>"), RPC counts from the RocketMQ
// clients: all on the same Registerer. A nil *metrics records nothing.
type metrics struct {
	sends        *prometheus.CounterVec   // topic, cluster, result, shadow
	sendLatency  *prometheus.HistogramVec // topic, shadow
	configErrors prometheus.Counter
	set          *promreg.Set
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "producer", Name: "sends_total",
			Help: "Messages by logic topic, cluster and result: ok, error (the send failed), or retried (an attempt failed and the message went on to another target); shadow is \"true\" for shadow (stress-test) traffic.",
		}, []string{"topic", "cluster", "result", "shadow"}),
		sendLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "twinmq", Subsystem: "producer", Name: "send_duration_seconds",
			Help:    "Time from a send call to its result, retries included, by logic topic and shadow (\"true\" for shadow traffic).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17),
		}, []string{"topic", "shadow"}),
		configErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "producer", Name: "config_rejected_total",
			Help: "Configuration versions the producer could not apply (the previous one keeps serving).",
		}),
	}
	set, err := promreg.Own(reg, m.sends, m.sendLatency, m.configErrors)
	if err != nil {
		return nil, fmt.Errorf("%w: producer metrics: %w", ErrInvalidConfig, err)
	}
	m.set = set
	return m, nil
}

// unregister removes the producer's own collectors (Close).
func (m *metrics) unregister() {
	if m != nil {
		m.set.Unregister()
	}
}

func (m *metrics) configRejected() {
	if m == nil {
		return
	}
	m.configErrors.Inc()
}
