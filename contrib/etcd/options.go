package etcd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Errors of this package, wrapped with detail.
var (
	// ErrUnavailable: etcd did not answer (down, partitioned, no leader)
	// before the call's context ended.
	ErrUnavailable = errors.New("etcd: unavailable")
	// ErrInvalidOptions: the options given to a constructor are unusable.
	ErrInvalidOptions = errors.New("etcd: invalid options")
	// ErrNoDocument: the configuration key does not exist (never
	// published, deleted, or lost with the store).
	ErrNoDocument = errors.New("etcd: no configuration document")
)

// DefaultPrefix is where the registry keeps its keys unless
// Options.Prefix says otherwise.
const DefaultPrefix = "/twinmq"

// Options configure NewRegistry and NewSource. The zero value is ready to
// use.
type Options struct {
	// Prefix of the registry's keys: an instance lives at
	// <Prefix>/lanes/<group>/<instance id>, both path-escaped. Default
	// DefaultPrefix. It must start with "/" and not end with one. The
	// config source does not use it (its key is given whole).
	Prefix string
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Registerer receives the metrics; nil registers nothing. A registry
	// and a source may share one (their metric names differ); two
	// registries need distinct ones (prometheus.WrapRegistererWith).
	Registerer prometheus.Registerer
}

func (o *Options) validate() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(o.Prefix, "/") || strings.HasSuffix(o.Prefix, "/") {
		return fmt.Errorf("%w: prefix %q must start with / and not end with one", ErrInvalidOptions, o.Prefix)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return nil
}

// registerAll registers every collector on reg (nothing when reg is nil).
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%w: registering metrics: %w", ErrInvalidOptions, err)
		}
	}
	return nil
}

// healthMetrics makes the three series every follower of etcd has:
// twinmq_etcd_<kind>_connected, _outages_total and _resyncs_total. who
// names the component in their help, and what the range it reads again.
func healthMetrics(kind, who, what string) (prometheus.Gauge, prometheus.Counter, prometheus.Counter) {
	return prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "twinmq_etcd_" + kind + "_connected",
			Help: "1 while " + who + " reaches etcd, 0 during an outage.",
		}), prometheus.NewCounter(prometheus.CounterOpts{
			Name: "twinmq_etcd_" + kind + "_outages_total",
			Help: "Outages of etcd seen by " + who + ".",
		}), prometheus.NewCounter(prometheus.CounterOpts{
			Name: "twinmq_etcd_" + kind + "_resyncs_total",
			Help: "Reads of " + what + " after a compaction, a broken watch or an outage.",
		})
}
