package broker

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one broker. Every collector carries const labels cluster and
// broker, so several brokers can share one Registerer; a broker restarted on
// the same Registerer reuses the collectors already registered.
type metrics struct {
	requests    *prometheus.CounterVec // rpc, code
	messagesIn  prometheus.Counter
	messagesOut prometheus.Counter
	redelivered prometheus.Counter
	deadLetters prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, cluster, broker string) *metrics {
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
	if reg == nil {
		return m
	}
	m.requests = register(reg, m.requests)
	m.messagesIn = register(reg, m.messagesIn)
	m.messagesOut = register(reg, m.messagesOut)
	m.redelivered = register(reg, m.redelivered)
	m.deadLetters = register(reg, m.deadLetters)
	return m
}

// register registers c, or returns the equal collector registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
