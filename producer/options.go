package producer

import (
	"crypto/tls"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/twinmq/twinmq/config"
)

// Option configures New.
type Option func(*options)

type options struct {
	cfg         *config.Config
	source      config.Source
	watcher     *config.Watcher
	logger      *zap.Logger
	registerer  prometheus.Registerer
	tlsConfig   *tls.Config
	dialOptions []grpc.DialOption
	instance    string
	failFast    bool
	checker     TransactionChecker
}

// WithConfig serves one fixed configuration document (no reload).
func WithConfig(cfg *config.Config) Option {
	return func(o *options) { o.cfg = cfg }
}

// WithSource makes the producer watch src (config.File, for instance) and
// apply every valid version live; a rejected version is logged and counted
// and the last good one keeps serving. The producer stops watching on
// Close.
func WithSource(src config.Source) Option {
	return func(o *options) { o.source = src }
}

// WithWatcher shares a running config.Watcher (for a service whose producer
// and consumers follow the same document). The producer subscribes to it
// and leaves it running on Close.
func WithWatcher(w *config.Watcher) Option {
	return func(o *options) { o.watcher = w }
}

// WithLogger sets the logger; the default logs nothing.
func WithLogger(l *zap.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithRegisterer registers the producer's metrics (and those of its batch
// accumulator, failover pickers, configuration watcher and RocketMQ
// clients) on reg; Close unregisters the producer's own. Without it nothing
// is registered. Several producers on one registry need distinct labels
// with the same names, e.g. each on
// prometheus.WrapRegistererWith(prometheus.Labels{"producer": name}, reg).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.registerer = reg }
}

// WithTLSConfig sets the TLS configuration used for clusters whose config
// says "tls": true. The default verifies the server against the system
// roots.
func WithTLSConfig(c *tls.Config) Option {
	return func(o *options) { o.tlsConfig = c }
}

// WithDialOptions adds gRPC dial options to every connection.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithInstanceName prefixes the RocketMQ client ids of this producer, which
// otherwise are generated from host, process and a counter. The ids must be
// unique per producer instance.
func WithInstanceName(name string) Option {
	return func(o *options) { o.instance = name }
}

// WithFailFast makes sends return an error wrapping batch.ErrBufferFull
// instead of waiting while the buffered bytes are at
// batching.totalBatchMaxBytes.
func WithFailFast() Option {
	return func(o *options) { o.failFast = true }
}
