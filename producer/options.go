package producer

import (
	"crypto/tls"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/clientopt"
)

// Option configures New.
type Option func(*options)

// options are the producer's own options beside those it shares with the
// consumer (clientopt.Common: configuration, logger, registerer, TLS, dial
// options, instance name).
type options struct {
	clientopt.Common
	failFast bool
	checker  TransactionChecker

	sendHooks []SendHook // WithHooks
}

// common wraps a setter of the shared options.
func common(set clientopt.Setter) Option { return func(o *options) { set(&o.Common) } }

// WithConfig serves one fixed configuration document (no reload).
func WithConfig(cfg *config.Config) Option { return common(clientopt.Config(cfg)) }

// WithSource makes the producer watch src (config.File, for instance) and
// apply every valid version live; a rejected version is logged and counted
// and the last good one keeps serving. The producer stops watching on
// Close.
func WithSource(src config.Source) Option { return common(clientopt.Source(src)) }

// WithWatcher shares a running config.Watcher (for a service whose producer
// and consumers follow the same document). The producer subscribes to it
// and leaves it running on Close.
func WithWatcher(w *config.Watcher) Option { return common(clientopt.Watcher(w)) }

// WithLogger sets the logger; the default logs nothing.
func WithLogger(l *zap.Logger) Option { return common(clientopt.Logger(l)) }

// WithRegisterer registers the producer's metrics (and those of its batch
// accumulator, failover pickers, configuration watcher and RocketMQ
// clients) on reg; Close unregisters the producer's own. Without it nothing
// is registered. Several producers on one registry need distinct labels
// with the same names, e.g. each on
// prometheus.WrapRegistererWith(prometheus.Labels{"producer": name}, reg).
func WithRegisterer(reg prometheus.Registerer) Option {
	return common(clientopt.Registerer(reg))
}

// WithTLSConfig sets the TLS configuration used for clusters whose config
// says "tls": true. The default verifies the server against the system
// roots.
func WithTLSConfig(c *tls.Config) Option { return common(clientopt.TLS(c)) }

// WithDialOptions adds gRPC dial options to every connection.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return common(clientopt.DialOptions(opts...))
}

// WithInstanceName prefixes the RocketMQ client ids of this producer, which
// otherwise are generated from host, process and a counter. The ids must be
// unique per producer instance.
func WithInstanceName(name string) Option { return common(clientopt.Instance(name)) }

// WithFailFast makes sends return an error wrapping batch.ErrBufferFull
// instead of waiting while the buffered bytes are at
// batching.totalBatchMaxBytes.
func WithFailFast() Option {
	return func(o *options) { o.failFast = true }
}
