package consumer

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/clientstate"
	"github.com/twinmq/twinmq/lane"
)

// groupPattern is RocketMQ's rule for consumer group names.
var groupPattern = regexp.MustCompile(`^[%|a-zA-Z0-9_-]+$`)

// Consumer receives one logic topic for one consumer group from every
// broker of every cluster of the topic, and runs the handler (here, or at
// the consumer of the message's lane). It is safe for concurrent use.
type Consumer struct {
	group   string
	topic   string
	handler Handler
	opts    options
	log     *zap.Logger
	met     *metrics
	id      string

	watcher     *config.Watcher
	ownWatcher  bool
	unsubscribe func()
	cfgState    clientstate.Config // the revision applied, what it refused

	// mu serializes configuration changes (and the lane registration they
	// may move).
	mu   sync.Mutex
	live atomic.Pointer[liveSettings]

	slots    *limiter // handler runs, local and forwarded
	inflight *limiter // received and not finished
	tracker  *tracker
	lanes    *laneRouter // nil without a lane registry
	shadow   *shadowSide // nil on the shadow side itself (see shadow.go)

	// clusters are the runners in force (guarded by mu); retiring counts
	// the ones a configuration dropped that are still settling.
	clusters   []*clusterRunner
	clusterSeq int
	retiring   sync.WaitGroup

	// recvCtx ends the receive loops (first step of Close); workCtx ends
	// handlers and settle calls (only when Close gives up waiting).
	recvCtx    context.Context
	recvCancel context.CancelFunc
	workCtx    context.Context
	workCancel context.CancelFunc
	loops      sync.WaitGroup
	work       sync.WaitGroup
	stopAck    chan struct{}

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// defaultMaxInflight is the floor of the default in-flight cap: as many
// messages as RocketMQ's Java push consumer caches by default. Receives,
// handling and acks overlap, so the cap, not the CPU, bounds throughput
// while brokers answer in milliseconds.
const defaultMaxInflight = 1024

// liveSettings are the values that follow the configuration live. They are
// swapped whole, so a reader never sees half of a change.
type liveSettings struct {
	concurrency    int
	maxAttempts    int
	inflight       int
	lane           string
	lanesOn        bool
	leaseTTL       time.Duration
	forwardTimeout time.Duration
	requestTimeout time.Duration
}

// New starts a consumer of group on the logic topic, running handler for
// each message. Exactly one of WithConfig, WithSource or WithWatcher must
// be given. New returns once receiving has started on every cluster whose
// brokers answered within ctx; a cluster that does not answer yet is
// retried in the background and consumed once it does.
//
// A ctx that has ended before New, or while it waits for the first version
// of the configuration, fails New with an error wrapping ctx.Err(). Bad
// options or arguments, and a configuration that is invalid, unreadable or
// missing (a file source's file does not exist), fail it with
// ErrInvalidConfig.
//
// When every cluster refuses the consumer (the servers answered its
// settings or its route query with a refusal: a group they do not know,
// credentials they reject, a topic they lack), New fails with an error
// wrapping ErrRefused and a *Refusal per cluster. Refusals that come
// later, from some clusters only, or of the receives themselves (settings
// below a broker's floors: a receive waits for messages, so New cannot
// wait for the first one) show in State at once and are logged at Error.
func New(ctx context.Context, group, topic string, handler Handler, opts ...Option) (*Consumer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("consumer: new: %w", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if handler == nil {
		return nil, fmt.Errorf("%w: handler is nil", ErrInvalidConfig)
	}
	if len(group) > config.MaxGroupNameLength || !groupPattern.MatchString(group) {
		return nil, fmt.Errorf("%w: group %q must match %s and have at most %d characters",
			ErrInvalidConfig, group, groupPattern, config.MaxGroupNameLength)
	}
	if topic == "" {
		return nil, fmt.Errorf("%w: topic is empty", ErrInvalidConfig)
	}
	c := &Consumer{
		group:   group,
		topic:   topic,
		handler: handler,
		opts:    o,
		log:     o.Logger.With(zap.String("group", group), zap.String("topic", topic), zap.String("instance", o.Instance)),
		id:      o.Instance,
		stopAck: make(chan struct{}),
	}
	c.recvCtx, c.recvCancel = context.WithCancel(context.Background())
	c.workCtx, c.workCancel = context.WithCancel(context.Background())

	var err error
	switch {
	case o.Watcher != nil:
		c.watcher = o.Watcher
	default:
		src := o.Source
		if o.Config != nil {
			if err := o.Config.Validate(); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
			}
			src = config.Static(o.Config)
		}
		c.watcher, err = config.Start(ctx, src, config.Options{Logger: o.Logger, Registerer: o.Registerer, Name: "consumer/" + group + "/" + topic})
		if err != nil {
			if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
				return nil, fmt.Errorf("consumer: new: %w", err)
			}
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		c.ownWatcher = true
	}
	fail := func(err error) (*Consumer, error) {
		c.abort(ctx)
		return nil, err
	}
	metricGroup, shadowLabel := group, "false"
	if o.shadowOf != "" {
		metricGroup, shadowLabel = o.shadowOf, "true"
	}
	if c.met, err = newMetrics(o.Registerer, metricGroup, topic, shadowLabel); err != nil {
		return fail(err)
	}

	c.mu.Lock()
	cur, rev, unsub := c.watcher.SubscribeVersion(c.onConfig)
	c.unsubscribe = unsub
	ls, err := c.settingsOf(cur)
	if err != nil {
		c.mu.Unlock()
		return fail(err)
	}
	c.cfgState.Applied(rev, time.Now())
	c.warnUnlistedGroup(cur)
	c.live.Store(ls)
	c.slots = newLimiter(ls.concurrency)
	c.inflight = newLimiter(ls.inflight)
	c.tracker = newTracker(c)
	if err := c.buildClusters(cur); err != nil {
		c.mu.Unlock()
		return fail(err)
	}
	if o.registry != nil {
		if c.lanes, err = newLaneRouter(ctx, c, ls); err != nil {
			c.mu.Unlock()
			return fail(err)
		}
	}
	// Start under mu, so a configuration arriving meanwhile applies to
	// running clusters, after this.
	c.tracker.start(c.stopAck)
	for _, cr := range c.clusters {
		cr.start(ctx)
	}
	if err := c.refusedEverywhere(); err != nil {
		c.mu.Unlock()
		return fail(err)
	}
	if o.shadowOf == "" {
		c.shadow = newShadowSide(c)
		c.shadow.offer(cur)
		go c.shadow.run()
	}
	c.log.Info("consumer started", zap.Int("clusters", len(c.clusters)), zap.String("lane", ls.lane),
		zap.Bool("lanes", c.lanes != nil && ls.lanesOn))
	c.mu.Unlock()
	return c, nil
}

// settingsOf derives the live settings from a document.
func (c *Consumer) settingsOf(cfg *config.Config) (*liveSettings, error) {
	cc := cfg.Consumers[c.group]
	ls := &liveSettings{
		concurrency:    cc.Concurrency,
		maxAttempts:    cc.MaxAttempts,
		lane:           cc.Lane,
		lanesOn:        cfg.Lanes.Enabled,
		leaseTTL:       cfg.Lanes.LeaseTTL.D(),
		forwardTimeout: cfg.Lanes.ForwardTimeout.D(),
		requestTimeout: cfg.Timeouts.Request.D(),
	}
	if _, ok := cfg.Consumers[c.group]; !ok {
		// A group the document does not list runs on the defaults; lanes
		// stay as the document says.
		ls.concurrency, ls.maxAttempts = config.DefaultConcurrency, config.DefaultMaxAttempts
	}
	if ls.concurrency <= 0 {
		ls.concurrency = config.DefaultConcurrency
	}
	if ls.maxAttempts <= 0 {
		ls.maxAttempts = config.DefaultMaxAttempts
	}
	if ls.leaseTTL <= 0 {
		ls.leaseTTL = config.DefaultLeaseTTL
	}
	if ls.forwardTimeout <= 0 {
		ls.forwardTimeout = config.DefaultForwardTimeout
	}
	if ls.requestTimeout <= 0 {
		ls.requestTimeout = config.DefaultRequestTimeout
	}
	if c.opts.lanePin {
		ls.lane = c.opts.lane
	}
	if err := lane.Validate(ls.lane); err != nil {
		return nil, fmt.Errorf("%w: consumers.%s.lane: %w", ErrInvalidConfig, c.group, err)
	}
	ls.inflight = c.opts.inflight
	if ls.inflight == 0 {
		ls.inflight = max(4*ls.concurrency, defaultMaxInflight)
	}
	if _, ok := cfg.Topics[c.topic]; !ok {
		return nil, fmt.Errorf("%w: %q is not in the configuration's topics", ErrUnknownTopic, c.topic)
	}
	for i, cc := range cfg.Topics[c.topic].Clusters {
		if cc.Protocol.Remoting() {
			return nil, fmt.Errorf("%w: topics.%s.clusters[%d] (cluster %q) speaks the remoting protocol, which the consumer does not consume yet (its producers may send there; consume the cluster through a gRPC proxy of it)",
				ErrUnsupported, c.topic, i, cc.Name)
		}
	}
	return ls, nil
}

// onConfig applies a new document: concurrency, in-flight limit, maximum
// attempts, lane and routing settings change at once; work in progress
// finishes under the settings it started with. A cluster of the topic that
// was added starts being consumed, one that was dropped (or changed:
// endpoints, physical topic, TLS, credentials) stops receiving and settles
// what it received before its client closes.
func (c *Consumer) onConfig(_, cur *config.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return
	}
	rev := c.watcher.Revision()
	ls, err := c.settingsOf(cur)
	if err != nil {
		c.cfgState.Refused(rev, err, time.Now())
		c.log.Error("consumer could not apply the configuration; the previous one keeps serving", zap.Error(err))
		return
	}
	prev := c.live.Swap(ls)
	c.slots.setLimit(ls.concurrency)
	c.inflight.setLimit(ls.inflight)
	if err := c.reconcileLocked(cur); err != nil {
		c.cfgState.Refused(rev, err, time.Now())
		c.log.Error("consumer could not apply the new clusters of the topic; the previous ones keep being consumed", zap.Error(err))
	} else {
		c.cfgState.Applied(rev, time.Now())
	}
	if c.lanes != nil && (prev.lane != ls.lane || prev.leaseTTL != ls.leaseTTL) {
		c.lanes.reregister(ls)
	}
	if c.shadow != nil {
		c.shadow.offer(cur)
	}
	c.log.Info("consumer applied a new configuration", zap.Int("concurrency", ls.concurrency),
		zap.Int("max_attempts", ls.maxAttempts), zap.String("lane", ls.lane), zap.Bool("lanes", ls.lanesOn))
}

// Lane returns the lane this consumer serves now ("" = base).
func (c *Consumer) Lane() string { return c.live.Load().lane }

// InstanceID returns the id of this consumer in the lane registry.
func (c *Consumer) InstanceID() string { return c.id }

// ForwardAddr returns the address of this consumer's forwarding service,
// or "" when lane routing is off.
func (c *Consumer) ForwardAddr() string {
	if c.lanes == nil {
		return ""
	}
	return c.lanes.server.addr
}

// Close stops the consumer gracefully: it leaves the lane registry and
// refuses new forwarded deliveries (so other consumers route around it),
// stops receiving, lets the handlers in progress finish and settles their
// messages (ack, nack or dead letter), waits for the forwarded deliveries
// it is serving, and tells the brokers it is gone. Messages received but
// not yet handled when Close began are handled too: nothing received is
// dropped. If ctx ends first, the handlers' contexts are canceled, what is
// unsettled comes back from the brokers after its invisible time, and
// Close returns ctx's error. Either way, the renewals of invisible time in
// flight have ended when Close returns (their calls are canceled, so the
// wait is short). Close is idempotent.
func (c *Consumer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { c.closeErr = c.close(ctx) })
	return c.closeErr
}

func (c *Consumer) close(ctx context.Context) error {
	c.mu.Lock()
	c.closed.Store(true)
	c.mu.Unlock()
	var errs []error
	shadowDone := make(chan error, 1)
	if c.shadow != nil {
		go func() { shadowDone <- c.shadow.close(ctx) }()
	} else {
		shadowDone <- nil
	}
	if c.lanes != nil {
		c.lanes.leave(ctx)
	}
	c.recvCancel()
	c.loops.Wait()

	workDone := make(chan struct{})
	go func() {
		c.work.Wait()
		close(workDone)
	}()
	serveDone := make(chan struct{})
	go func() {
		if c.lanes != nil {
			c.lanes.server.stop(ctx)
		}
		close(serveDone)
	}()
	wait := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !wait(workDone) || !wait(serveDone) {
		errs = append(errs, fmt.Errorf("consumer: close: waiting for messages in progress: %w", ctx.Err()))
		c.workCancel()
	}
	c.abort(ctx)
	if err := <-shadowDone; err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// abort releases everything New built; it is the tail of Close and the
// cleanup of a failed New.
func (c *Consumer) abort(ctx context.Context) {
	c.closed.Store(true)
	c.recvCancel()
	c.loops.Wait()
	close(c.stopAck)
	c.workCancel()
	if c.tracker != nil {
		c.tracker.wait() // renewals in flight end with workCtx
	}
	if c.unsubscribe != nil {
		c.unsubscribe()
	}
	if c.ownWatcher {
		_ = c.watcher.Close()
	}
	if c.lanes != nil {
		c.lanes.shutdown(ctx)
	}
	// Clusters dropped by a reload settle on their own; wait for them as
	// for any work, within ctx.
	retired := make(chan struct{})
	go func() {
		c.retiring.Wait()
		close(retired)
	}()
	select {
	case <-retired:
	case <-ctx.Done():
	}
	c.mu.Lock()
	clusters := slices.Clone(c.clusters)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, cr := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cr.client.Close(ctx); err != nil {
				c.log.Debug("closing a RocketMQ client", zap.String("cluster", cr.name), zap.Error(err))
			}
		}()
	}
	wg.Wait()
	c.met.unregister()
}
