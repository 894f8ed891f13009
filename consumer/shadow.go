package consumer

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
)

// Shadow (stress-test) traffic. A consumer of group G on logic topic T
// also consumes T's shadow topics in G's shadow group, when the document
// gives T shadow topics, names shadow groups and has shadow.enabled on. It
// does so with a second, inner Consumer of the shadow group that it owns:
// its own RocketMQ clients (the group is a client's setting), receive
// loops, in-flight and handler limits, lane registration and forwarding
// service, over a document derived from the outer one (T's clusters with
// their shadow topics as physical topics, and G's settings under the
// shadow group's name). Offsets, retries and dead letters belong to a
// group on the broker, so shadow and production ones never mix. The inner
// consumer runs the same handler with lane.WithShadow(ctx, true) in its
// ctx, so whatever the handler sends goes to shadow topics in turn.
//
// A side-manager goroutine follows the document: it starts the inner
// consumer when shadow consumption is wanted (retrying every
// shadowRetryInterval while it cannot start, a shadow topic missing on the
// brokers say), passes every new version on to it, and closes it
// gracefully when the kill switch is turned off, the topic loses its
// shadow topics or the shadow group's name changes (then a new one
// starts). Close closes it with the same ctx as the outer consumer.

// shadowRetryInterval is how often a shadow side that could not start is
// tried again.
const shadowRetryInterval = 5 * time.Second

// WithShadowForwardListen sets where the forwarding service of the shadow
// side listens and the address it registers (as WithForwardListen does for
// production). By default it listens on the host of the production
// listener with a port of its own and registers the listener's address: a
// deployment that sets an advertised address for production sets this too.
func WithShadowForwardListen(listen, advertise string) Option {
	return func(o *options) { o.shadowListen, o.shadowAdvertise = listen, advertise }
}

// shadowSide owns the inner consumer of the shadow group.
type shadowSide struct {
	c    *Consumer
	cfg  chan *config.Config // latest document, capacity 1 (newest wins)
	quit chan struct{}       // closed by Close
	done chan struct{}       // closed when the manager has ended
	// closeCtx is the ctx of Close, for closing the inner consumer; set
	// before quit is closed. quitCtx ends with quit (a start in progress
	// gives up); hardCtx ends when Close's ctx does (a graceful stop in
	// progress gives up waiting).
	closeCtx   context.Context
	quitCtx    context.Context
	quitCancel context.CancelFunc
	hardCtx    context.Context
	hardCancel context.CancelFunc

	mu      sync.Mutex // guards what State reads
	inner   *Consumer
	group   string
	lastErr error

	// Owned by the manager goroutine.
	watcher *config.Watcher
	in      chan config.Version
}

func newShadowSide(c *Consumer) *shadowSide {
	s := &shadowSide{c: c, cfg: make(chan *config.Config, 1), quit: make(chan struct{}), done: make(chan struct{})}
	s.quitCtx, s.quitCancel = context.WithCancel(context.Background())
	s.hardCtx, s.hardCancel = context.WithCancel(context.Background())
	return s
}

// offer hands the manager the latest document, replacing one it has not
// taken yet.
func (s *shadowSide) offer(cfg *config.Config) {
	for {
		select {
		case s.cfg <- cfg:
			return
		default:
		}
		select {
		case <-s.cfg:
		default:
		}
	}
}

// shadowDoc derives the inner consumer's document from cfg: group's shadow
// group consuming topic's shadow topics. ok is false when shadow
// consumption is not wanted (kill switch off, no shadow topics, no shadow
// group name).
func shadowDoc(cfg *config.Config, group, topic string) (doc *config.Config, shadowGroup string, ok bool) {
	if !cfg.Shadow.Enabled || !cfg.HasShadow(topic) {
		return nil, "", false
	}
	sg, ok := cfg.ShadowGroup(group)
	if !ok {
		return nil, "", false
	}
	d := cfg.Clone()
	tc := d.Topics[topic]
	for i, cc := range tc.Clusters {
		tc.Clusters[i].Topic, _ = cfg.ShadowTopic(topic, cc)
		tc.Clusters[i].ShadowTopic = ""
	}
	d.Topics = map[string]config.Topic{topic: tc}
	d.Consumers = nil
	if cc, listed := cfg.Consumers[group]; listed {
		d.Consumers = map[string]config.Consumer{sg: cc}
	}
	d.Shadow = config.Shadow{}
	return d, sg, true
}

// run is the manager goroutine.
func (s *shadowSide) run() {
	defer close(s.done)
	var (
		retry *time.Timer
		cur   *config.Config
	)
	retryC := func() <-chan time.Time {
		if retry == nil {
			return nil
		}
		return retry.C
	}
	for {
		select {
		case <-s.quit:
			if retry != nil {
				retry.Stop()
			}
			s.stopInner(s.closeCtx)
			return
		case cur = <-s.cfg:
		case <-retryC():
		}
		if retry != nil {
			retry.Stop()
			retry = nil
		}
		if err := s.apply(cur); err != nil {
			if s.quitCtx.Err() != nil {
				continue // Close came while it started: quit is next
			}
			s.mu.Lock()
			s.lastErr = err
			s.mu.Unlock()
			s.c.log.Error("could not start consuming shadow traffic; trying again", zap.Error(err),
				zap.Duration("retry_in", shadowRetryInterval))
			retry = time.NewTimer(shadowRetryInterval)
		}
	}
}

// apply makes the inner consumer follow cfg.
func (s *shadowSide) apply(cfg *config.Config) error {
	doc, sg, want := shadowDoc(cfg, s.c.group, s.c.topic)
	s.mu.Lock()
	inner, group := s.inner, s.group
	s.mu.Unlock()
	if inner != nil && (!want || group != sg) {
		// A graceful stop: what was received is handled and settled.
		// Close's ctx bounds it if Close comes meanwhile (stopInner).
		ctx, cancel := context.WithTimeout(s.hardCtx, s.c.opts.invisible)
		s.stopInner(ctx)
		cancel()
		inner = nil
		s.c.log.Info("stopped consuming shadow traffic", zap.String("shadow_group", group), zap.Bool("kill_switch", !cfg.Shadow.Enabled))
	}
	if !want {
		s.mu.Lock()
		s.lastErr = nil
		s.mu.Unlock()
		return nil
	}
	v := config.Version{Config: doc}
	if data, err := doc.Marshal(); err == nil {
		v.Revision = config.Revision(data)
	}
	if inner != nil {
		select {
		case s.in <- v:
		case <-s.quit:
		}
		return nil
	}
	return s.startInner(sg, v)
}

// startInner starts the inner consumer of shadow group sg on version v.
func (s *shadowSide) startInner(sg string, v config.Version) error {
	c := s.c
	ctx, cancel := context.WithTimeout(s.quitCtx, c.live.Load().requestTimeout)
	defer cancel()
	in := make(chan config.Version, 1)
	in <- v
	w, err := config.Start(ctx, config.Chan(in), config.Options{Logger: c.opts.Logger})
	if err != nil {
		return fmt.Errorf("shadow group %q: %w", sg, err)
	}
	o := c.opts
	o.Config, o.Source, o.Watcher = nil, nil, w
	o.Instance = c.opts.Instance + "-shadow"
	o.shadowOf = c.group
	o.forwardListen, o.forwardAddr = o.shadowListen, o.shadowAdvertise
	if o.forwardListen == "" {
		host, _, err := net.SplitHostPort(c.opts.forwardListen)
		if err != nil {
			host = "127.0.0.1"
		}
		o.forwardListen, o.forwardAddr = net.JoinHostPort(host, "0"), ""
	}
	inner, err := New(ctx, sg, c.topic, c.handler, func(dst *options) { *dst = o })
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("shadow group %q: %w", sg, err)
	}
	s.watcher, s.in = w, in
	s.mu.Lock()
	s.inner, s.group, s.lastErr = inner, sg, nil
	s.mu.Unlock()
	c.log.Info("consuming shadow traffic", zap.String("shadow_group", sg))
	return nil
}

// stopInner closes the inner consumer, if any, and its watcher.
func (s *shadowSide) stopInner(ctx context.Context) {
	s.mu.Lock()
	inner := s.inner
	s.inner, s.group = nil, ""
	s.mu.Unlock()
	if inner == nil {
		return
	}
	if err := inner.Close(ctx); err != nil {
		s.c.log.Warn("closing the shadow consumer", zap.Error(err))
	}
	_ = s.watcher.Close()
	s.watcher, s.in = nil, nil
}

// close stops the manager, which closes the inner consumer with ctx, and
// waits for it (within ctx).
func (s *shadowSide) close(ctx context.Context) error {
	s.closeCtx = ctx
	stop := context.AfterFunc(ctx, s.hardCancel)
	defer stop()
	defer s.hardCancel()
	s.quitCancel()
	close(s.quit)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		<-s.done // the inner consumer's Close ends promptly once ctx ended
		return fmt.Errorf("consumer: close: shadow side: %w", ctx.Err())
	}
}

// current returns the inner consumer while it runs (else nil) and why the
// latest start failed.
func (s *shadowSide) current() (*Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner, s.lastErr
}

// ShadowState returns the State of the shadow side of this consumer (the
// inner consumer of the shadow group) while it runs. Without one, ok is
// false and err says why the latest start failed (nil when shadow
// consumption is simply not configured or switched off).
func (c *Consumer) ShadowState() (st State, ok bool, err error) {
	if c.shadow == nil {
		return State{}, false, nil
	}
	inner, err := c.shadow.current()
	if inner == nil {
		return State{}, false, err
	}
	return inner.State(), true, nil
}
