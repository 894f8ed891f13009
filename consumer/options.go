package consumer

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/clientopt"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

// Defaults of the options.
const (
	// DefaultInvisibleDuration is how long a received message stays hidden
	// from other consumers before the consumer must ack it or extend it.
	// The consumer extends it while the handler runs, so it bounds only how
	// soon a crashed consumer's messages come back.
	DefaultInvisibleDuration = 30 * time.Second
	// DefaultBatchSize is the most messages asked for per receive (the
	// RocketMQ proxy caps it at 32).
	DefaultBatchSize = 32
	// DefaultForwardListen is where the forwarding service listens when
	// lanes are on and WithForwardListen is not given: loopback only, so
	// nothing is exposed by accident. A service reachable from other hosts
	// sets its own address.
	DefaultForwardListen = "127.0.0.1:0"
	// ForwardTokenHeader is the gRPC metadata key carrying the group's
	// forwarding token.
	ForwardTokenHeader = "twinmq-forward-token" //nolint:gosec // G101: a metadata key name, not a credential
)

// Option configures New.
type Option func(*options)

// options are the consumer's own options beside those it shares with the
// producer (clientopt.Common: configuration, logger, registerer, TLS, dial
// options, instance name).
type options struct {
	clientopt.Common

	filter    string
	lane      string
	lanePin   bool
	ordered   bool
	invisible time.Duration
	polling   time.Duration
	batchSize int
	inflight  int
	backoff   func(attempt int) time.Duration

	registry      lane.Registry
	forwardListen string
	forwardAddr   string
	forwardToken  string
	forwardServer *tls.Config
	forwardClient *tls.Config

	hooks hooks // WithHooks, sorted by interface
	// shadowOf is set on the inner consumer of a shadow group (see
	// shadow.go): the production group it serves.
	shadowOf        string
	shadowListen    string
	shadowAdvertise string

	// newClient makes the RocketMQ client of a cluster; nil means the
	// driver. Only this package's tests set it.
	newClient func(driver.Config) (brokerClient, error)
	// forwardObserver hears the duration of every forward a target
	// answered (handled or handler failed). Only this package's benchmarks
	// set it, to compute exact percentiles.
	forwardObserver func(time.Duration)
}

// common wraps a setter of the shared options.
func common(set clientopt.Setter) Option { return func(o *options) { set(&o.Common) } }

// WithConfig serves one fixed configuration document (no reload).
func WithConfig(cfg *config.Config) Option { return common(clientopt.Config(cfg)) }

// WithSource makes the consumer watch src and apply every valid version
// live: concurrency, maximum attempts, this consumer's lane and the lane
// routing settings. The consumer stops watching on Close.
func WithSource(src config.Source) Option { return common(clientopt.Source(src)) }

// WithWatcher shares a running config.Watcher (a service whose producer and
// consumers follow one document). The consumer subscribes to it and leaves
// it running on Close.
func WithWatcher(w *config.Watcher) Option { return common(clientopt.Watcher(w)) }

// WithLogger sets the logger; the default logs nothing.
func WithLogger(l *zap.Logger) Option { return common(clientopt.Logger(l)) }

// WithRegisterer registers the consumer's metrics (and its RocketMQ
// clients') on reg; Close unregisters the consumer's own. Without it
// nothing is registered. The consumer's series carry its group and topic,
// so consumers of different groups or topics share a registry; two of the
// same group and topic need distinct labels
// (prometheus.WrapRegistererWith), or New fails with ErrInvalidConfig.
func WithRegisterer(reg prometheus.Registerer) Option {
	return common(clientopt.Registerer(reg))
}

// WithTLSConfig sets the TLS configuration for clusters whose config says
// "tls": true. The default verifies the server against the system roots.
func WithTLSConfig(c *tls.Config) Option { return common(clientopt.TLS(c)) }

// WithDialOptions adds gRPC dial options to every broker connection.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return common(clientopt.DialOptions(opts...))
}

// WithInstanceName names this consumer instance: it prefixes the RocketMQ
// client ids and is the instance id in the lane registry. It must be unique
// within the group; the default is made of host, process and start time.
func WithInstanceName(name string) Option { return common(clientopt.Instance(name)) }

// WithTagFilter receives only messages whose RocketMQ tag matches expr
// ("*" for all, the default; "a||b" for either). The brokers filter, and
// acknowledge what does not match on the group's behalf.
func WithTagFilter(expr string) Option { return func(o *options) { o.filter = expr } }

// WithLane pins this consumer's lane, overriding consumers.<group>.lane of
// the configuration (which then no longer moves it). A deployment that
// knows its lane from its environment uses this; one that is told by the
// platform leaves it out.
func WithLane(name string) Option {
	return func(o *options) { o.lane, o.lanePin = name, true }
}

// WithOrdered makes the consumer keep the order of each message group even
// if the servers do not say the group is ordered (they do for a FIFO group).
func WithOrdered() Option { return func(o *options) { o.ordered = true } }

// WithInvisibleDuration sets how long a received message stays hidden
// before it must be acked or extended (default DefaultInvisibleDuration).
// RocketMQ requires at least 10 s and refuses every receive below that
// (logged at Error); the embedded broker can allow less for tests
// (embedded.Options.MinInvisibleDuration).
func WithInvisibleDuration(d time.Duration) Option { return func(o *options) { o.invisible = d } }

// WithLongPolling sets how long a receive waits at a broker for messages;
// the default is what the server pushes (20 s for RocketMQ). RocketMQ
// requires at least 5 s and refuses every receive below that (logged at
// Error, as ILLEGAL_POLLING_TIME); the embedded broker can allow less for
// tests (embedded.Options.MinLongPolling).
func WithLongPolling(d time.Duration) Option { return func(o *options) { o.polling = d } }

// WithBatchSize sets the most messages asked for per receive (1..32,
// default 32).
func WithBatchSize(n int) Option { return func(o *options) { o.batchSize = n } }

// WithMaxInflight caps the messages received and not yet finished (waiting
// for a handler slot, handled, or forwarded) across all brokers: no
// receive starts while the cap is reached, and a receive asks for no more
// than the room left. Receives of different brokers run at once, so the
// cap can be passed by at most one batch per receive. The default is four
// times the concurrency, at least 1024, following live changes of the
// concurrency.
func WithMaxInflight(n int) Option { return func(o *options) { o.inflight = n } }

// WithRetryBackoff sets how long a failed message stays invisible before
// its next delivery, by the attempt that failed (1 = the first delivery).
// The default is the retry policy the server pushes for the group, else
// 1 s doubling to 60 s.
func WithRetryBackoff(f func(attempt int) time.Duration) Option {
	return func(o *options) { o.backoff = f }
}

// WithLaneRegistry turns lane routing on: the consumer registers itself
// (group, lane, forwarding address) in reg under a lease, serves the
// forwarding service, and forwards the messages of other lanes to their
// consumers. It needs WithForwardToken.
func WithLaneRegistry(reg lane.Registry) Option { return func(o *options) { o.registry = reg } }

// WithForwardListen sets where the forwarding service listens
// (default DefaultForwardListen) and, when advertise is not empty, the
// address registered for other consumers to dial (default: the listener's
// address). The service reads a whole request, up to the largest body the
// client decodes plus 4 MiB, before it checks the forwarding token: listen
// where only the group's consumers can connect, or require client
// certificates with WithForwardTLS.
func WithForwardListen(listen, advertise string) Option {
	return func(o *options) { o.forwardListen, o.forwardAddr = listen, advertise }
}

// WithForwardToken sets the group's forwarding credential: every forwarded
// delivery carries it and the forwarding service refuses callers without
// it (compared in constant time). All consumers of the group share it.
func WithForwardToken(token string) Option { return func(o *options) { o.forwardToken = token } }

// WithForwardTLS secures the forwarding service with TLS: server for the
// listener (set ClientAuth to tls.RequireAndVerifyClientCert for mutual
// TLS) and client for dialling the other consumers. The token is checked
// too.
func WithForwardTLS(server, client *tls.Config) Option {
	return func(o *options) { o.forwardServer, o.forwardClient = server, client }
}

// validate checks what can be checked before the configuration is known.
func (o *options) validate() error {
	if err := o.Normalize(ErrInvalidConfig); err != nil {
		return err
	}
	switch {
	case o.invisible < 0:
		return fmt.Errorf("%w: invisible duration %v is negative", ErrInvalidConfig, o.invisible)
	case o.polling < 0:
		return fmt.Errorf("%w: long polling %v is negative", ErrInvalidConfig, o.polling)
	case o.batchSize < 0 || o.batchSize > 32:
		return fmt.Errorf("%w: batch size %d is outside 1..32", ErrInvalidConfig, o.batchSize)
	case o.inflight < 0:
		return fmt.Errorf("%w: max in-flight %d is negative", ErrInvalidConfig, o.inflight)
	}
	if o.lanePin {
		if err := lane.Validate(o.lane); err != nil {
			return fmt.Errorf("%w: WithLane: %w", ErrInvalidConfig, err)
		}
	}
	if o.registry != nil && o.forwardToken == "" {
		return fmt.Errorf("%w: lane routing needs WithForwardToken, the group's credential for forwarded messages", ErrInvalidConfig)
	}
	if (o.forwardServer == nil) != (o.forwardClient == nil) {
		return fmt.Errorf("%w: WithForwardTLS needs both the server and the client configuration", ErrInvalidConfig)
	}
	if o.filter == "" {
		o.filter = "*"
	}
	if o.invisible == 0 {
		o.invisible = DefaultInvisibleDuration
	}
	if o.batchSize == 0 {
		o.batchSize = DefaultBatchSize
	}
	if o.forwardListen == "" {
		o.forwardListen = DefaultForwardListen
	}
	return nil
}
