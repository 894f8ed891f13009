package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/internal/promreg"
)

// metrics of one broker. Every collector carries const labels cluster and
// broker, so several brokers can share one Registerer; a broker restarted on
// the same Registerer reuses the collectors already registered (see
// promreg).
type metrics struct {
	requests    *prometheus.CounterVec // rpc, code
	messagesIn  prometheus.Counter
	messagesOut prometheus.Counter
	redelivered prometheus.Counter
	deadLetters prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, cluster, broker string) (*metrics, error) {
	labels := prometheus.Labels{"cluster": cluster, "broker": broker}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "broker", Name: "requests_total",
			Help:        "RPCs served, by method and protocol status code.",
			ConstLabels: labels,
		}, []string{"rpc", "code"}),
		messagesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "broker", Name: "messages_in_total",
			Help: "Messages stored by SendMessage.", ConstLabels: labels,
		}),
		messagesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "broker", Name: "messages_out_total",
			Help: "Messages delivered by ReceiveMessage (redeliveries included).", ConstLabels: labels,
		}),
		redelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "broker", Name: "redeliveries_total",
			Help: "Deliveries after the first of a message.", ConstLabels: labels,
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "twinmq", Subsystem: "broker", Name: "dead_letters_total",
			Help: "Messages moved to a dead-letter topic.", ConstLabels: labels,
		}),
	}
	var err error
	if m.requests, err = promreg.Register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.messagesIn, err = promreg.Register(reg, m.messagesIn); err != nil {
		return nil, err
	}
	if m.messagesOut, err = promreg.Register(reg, m.messagesOut); err != nil {
		return nil, err
	}
	if m.redelivered, err = promreg.Register(reg, m.redelivered); err != nil {
		return nil, err
	}
	if m.deadLetters, err = promreg.Register(reg, m.deadLetters); err != nil {
		return nil, err
	}
	return m, nil
}
