package consumer

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/internal/promreg"
)

// Label values.
const (
	// handled_total results.
	resultOK     = "ok"
	resultError  = "error"
	resultPanic  = "panic"
	resultCancel = "canceled"

	// forwarded_total results.
	fwdHandled     = "handled"
	fwdFailed      = "handler_failed"
	fwdUnreachable = "unreachable"
	fwdRefused     = "refused"
	fwdUnknown     = "unknown"

	// dead_letters_total reasons.
	dlqMaxAttempts = "max_attempts"
	dlqCorrupt     = "undecodable"
)

// metrics holds the consumer's collectors, all labelled with the group,
// the logic topic and shadow (constant labels; the shadow side of group G
// counts under group G with shadow="true"). A nil *metrics records nothing, so the
// hot path needs no check beyond the nil receiver.
type metrics struct {
	received    *prometheus.CounterVec // cluster
	redelivered prometheus.Counter
	handled     *prometheus.CounterVec // result
	latency     prometheus.Histogram
	forwarded   *prometheus.CounterVec // result
	fwdLatency  prometheus.Histogram
	fallback    *prometheus.CounterVec // level
	served      *prometheus.CounterVec // result, forwarded deliveries served here
	held        prometheus.Counter
	deadLetters *prometheus.CounterVec // reason
	ackErrors   *prometheus.CounterVec // op
	malformed   prometheus.Counter
	set         *promreg.Set
}

func newMetrics(reg prometheus.Registerer, group, topic, shadow string) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	cl := prometheus.Labels{"group": group, "topic": topic, "shadow": shadow}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "consumer", Name: name, Help: help, ConstLabels: cl,
		}, labels)
	}
	m := &metrics{
		received: counter("received_total", "Messages received from the brokers, by cluster.", "cluster"),
		redelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "consumer", Name: "redeliveries_total", ConstLabels: cl,
			Help: "Messages received with a delivery attempt above 1 (a redelivery after a failure, a timeout or a hold).",
		}),
		handled: counter("handled_total", "Handler runs in this consumer, by result: ok, error, panic, canceled.", "result"),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "twinmq", Subsystem: "consumer", Name: "handler_duration_seconds", ConstLabels: cl,
			Help:    "Time a handler ran, whatever its result.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		forwarded: counter("forwarded_total", "Messages forwarded to another lane's consumer, by result: handled, handler_failed, unreachable (not delivered, another instance or level was tried), refused (not delivered: wrong lane, closing or unauthenticated), unknown (the outcome was lost; left for redelivery).", "result"),
		fwdLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "twinmq", Subsystem: "consumer", Name: "forward_duration_seconds", ConstLabels: cl,
			Help:    "Time of one forwarded delivery, the remote handler included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		fallback: counter("fallback_level_total", "Routed messages by fallback level used: 0 = the message's own lane, 1 = its parent, ...", "level"),
		served:   counter("forward_served_total", "Forwarded deliveries this consumer served, by result: handled, handler_failed, refused.", "result"),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "consumer", Name: "held_total", ConstLabels: cl,
			Help: "Messages left for redelivery because no lane could take them (no live base consumer, or a forward whose outcome was lost).",
		}),
		deadLetters: counter("dead_letters_total", "Messages moved to the dead-letter topic, by reason: max_attempts, undecodable.", "reason"),
		ackErrors:   counter("settle_errors_total", "Failed broker calls settling a delivery, by operation: ack, nack, renew, dead_letter.", "op"),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "consumer", Name: "malformed_lane_total", ConstLabels: cl,
			Help: "Messages received with a malformed lane property, handled as base.",
		}),
	}
	set, err := promreg.Own(reg, m.received, m.redelivered, m.handled, m.latency, m.forwarded, m.fwdLatency,
		m.fallback, m.served, m.held, m.deadLetters, m.ackErrors, m.malformed)
	if err != nil {
		return nil, fmt.Errorf("%w: consumer metrics: %w", ErrInvalidConfig, err)
	}
	m.set = set
	return m, nil
}

// unregister removes the consumer's own collectors (Close).
func (m *metrics) unregister() {
	if m != nil {
		m.set.Unregister()
	}
}

func (m *metrics) receivedFrom(cluster string, attempt int32) {
	if m == nil {
		return
	}
	m.received.WithLabelValues(cluster).Inc()
	if attempt > 1 {
		m.redelivered.Inc()
	}
}

func (m *metrics) handlerRan(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.handled.WithLabelValues(result).Inc()
	m.latency.Observe(d.Seconds())
}

func (m *metrics) forwardDone(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.forwarded.WithLabelValues(result).Inc()
	if result == fwdHandled || result == fwdFailed {
		m.fwdLatency.Observe(d.Seconds())
	}
}

func (m *metrics) level(n int) {
	if m != nil {
		m.fallback.WithLabelValues(strconv.Itoa(n)).Inc()
	}
}

func (m *metrics) servedForward(result string) {
	if m != nil {
		m.served.WithLabelValues(result).Inc()
	}
}

func (m *metrics) hold() {
	if m != nil {
		m.held.Inc()
	}
}

func (m *metrics) deadLetter(reason string) {
	if m != nil {
		m.deadLetters.WithLabelValues(reason).Inc()
	}
}

func (m *metrics) settleError(op string) {
	if m != nil {
		m.ackErrors.WithLabelValues(op).Inc()
	}
}

func (m *metrics) malformedLane() {
	if m != nil {
		m.malformed.Inc()
	}
}
