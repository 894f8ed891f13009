package dial

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/internal/promreg"
)

// metrics are the dial's collectors, labelled by logic topic, cluster,
// broker and endpoint (and kind where it matters). A nil *metrics records
// nothing.
type metrics struct {
	sent, received, lost, dups, late, sendErrs *prometheus.CounterVec
	reports                                    *prometheus.CounterVec
	latency                                    *prometheus.HistogramVec
	lateness                                   *prometheus.HistogramVec
	p50, p99, up                               *prometheus.GaugeVec
	set                                        *promreg.Set
}

var brokerLabels = []string{"topic", "cluster", "broker", "endpoint"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	kinded := append(append([]string{}, brokerLabels...), "kind")
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "twinmq", Subsystem: "dial", Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "twinmq", Subsystem: "dial", Name: name, Help: help}, brokerLabels)
	}
	buckets := prometheus.ExponentialBuckets(0.001, 2, 16)
	m := &metrics{
		sent:     counter("sent_total", "Probes whose send began, by broker and kind (normal, delay, transaction).", kinded),
		received: counter("received_total", "Probes received back in time, by broker and kind.", kinded),
		lost:     counter("lost_total", "Probes not received within the reconciliation period after they were due (a send still waiting then counts too), by broker and kind.", kinded),
		dups:     counter("duplicated_total", "Probes received more than once, by broker and kind.", kinded),
		late:     counter("late_total", "Probes received after they had been counted lost, by broker and kind.", kinded),
		sendErrs: counter("send_errors_total", "Probe sends (or transaction commits) that failed, by broker and kind.", kinded),
		reports:  counter("reports_total", "Reconciliation ticks that found trouble on a broker (new losses, duplicates or send errors, or a p99 above the limit).", brokerLabels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "twinmq", Subsystem: "dial", Name: "latency_seconds",
			Help:    "End-to-end latency of normal and transactional probes, from the send's (or commit's) answer to the receipt, by broker and kind.",
			Buckets: buckets,
		}, kinded),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "twinmq", Subsystem: "dial", Name: "delay_lateness_seconds",
			Help:    "Time from a delayed probe's delivery time to its receipt, by broker.",
			Buckets: buckets,
		}, brokerLabels),
		p50: gauge("latency_p50_seconds", "Median end-to-end latency of a broker's probes over the last two reconciliation periods."),
		p99: gauge("latency_p99_seconds", "99th percentile end-to-end latency of a broker's probes over the last two reconciliation periods."),
		up:  gauge("broker_up", "0 from a report on the broker (lost, duplicated, send errors, slow p99) until a reconciliation period passes without one; 1 otherwise."),
	}
	set, err := promreg.Own(reg, m.sent, m.received, m.lost, m.dups, m.late, m.sendErrs, m.reports,
		m.latency, m.lateness, m.p50, m.p99, m.up)
	if err != nil {
		return nil, fmt.Errorf("%w: dial metrics: %w", ErrInvalidOptions, err)
	}
	m.set = set
	return m, nil
}

func (m *metrics) unregister() {
	if m != nil {
		m.set.Unregister()
	}
}

// series are one broker's label values; a nil *series records nothing.
type series struct {
	m      *metrics
	labels []string
}

func (m *metrics) seriesOf(b Broker) *series {
	if m == nil {
		return nil
	}
	return &series{m: m, labels: []string{b.Topic, b.Cluster, b.Broker, b.Endpoint}}
}

func (s *series) kinded(k Kind) []string {
	return append(append(make([]string, 0, 5), s.labels...), string(k))
}

func (s *series) sent(k Kind) {
	if s != nil {
		s.m.sent.WithLabelValues(s.kinded(k)...).Inc()
	}
}

func (s *series) received(k Kind) {
	if s != nil {
		s.m.received.WithLabelValues(s.kinded(k)...).Inc()
	}
}

func (s *series) lost(k Kind) {
	if s != nil {
		s.m.lost.WithLabelValues(s.kinded(k)...).Inc()
	}
}

func (s *series) duplicated(k Kind) {
	if s != nil {
		s.m.dups.WithLabelValues(s.kinded(k)...).Inc()
	}
}

func (s *series) late(k Kind) {
	if s != nil {
		s.m.late.WithLabelValues(s.kinded(k)...).Inc()
	}
}

func (s *series) sendError(k Kind) {
	if s != nil {
		s.m.sendErrs.WithLabelValues(s.kinded(k)...).Inc()
	}
}

func (s *series) report() {
	if s != nil {
		s.m.reports.WithLabelValues(s.labels...).Inc()
	}
}

func (s *series) latency(k Kind, d time.Duration) {
	if s != nil {
		s.m.latency.WithLabelValues(s.kinded(k)...).Observe(d.Seconds())
	}
}

func (s *series) lateness(d time.Duration) {
	if s != nil {
		s.m.lateness.WithLabelValues(s.labels...).Observe(d.Seconds())
	}
}

func (s *series) percentiles(p50, p99 time.Duration) {
	if s != nil {
		s.m.p50.WithLabelValues(s.labels...).Set(p50.Seconds())
		s.m.p99.WithLabelValues(s.labels...).Set(p99.Seconds())
	}
}

func (s *series) up(ok bool) {
	if s == nil {
		return
	}
	v := 0.0
	if ok {
		v = 1
	}
	s.m.up.WithLabelValues(s.labels...).Set(v)
}

// delete removes every series of the broker (it is no longer probed).
func (s *series) delete() {
	if s == nil {
		return
	}
	l := prometheus.Labels{"topic": s.labels[0], "cluster": s.labels[1], "broker": s.labels[2], "endpoint": s.labels[3]}
	for _, v := range []*prometheus.CounterVec{s.m.sent, s.m.received, s.m.lost, s.m.dups, s.m.late, s.m.sendErrs, s.m.reports} {
		v.DeletePartialMatch(l)
	}
	s.m.latency.DeletePartialMatch(l)
	s.m.lateness.DeletePartialMatch(l)
	for _, v := range []*prometheus.GaugeVec{s.m.p50, s.m.p99, s.m.up} {
		v.DeletePartialMatch(l)
	}
}
