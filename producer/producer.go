package producer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/batch"
	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/failover"
	"github.com/twinmq/twinmq/internal/clientstate"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/remoting"
)

// Producer sends messages to logic topics. It is safe for concurrent use;
// create one per process and configuration, and Close it when done.
type Producer struct {
	opts    options
	log     *zap.Logger
	metrics *metrics
	ids     *driver.MessageIDGenerator

	watcher     *config.Watcher
	ownWatcher  bool
	unsubscribe func()
	cfgState    clientstate.Config // the revision applied, what it refused

	acc       *batch.Accumulator[batchKey, *pending, driver.SendResult]
	lines     fifoLines // FIFO messages that go alone (batching off)
	deadlines deadlines
	// pendings recycles the state of synchronous sends, requests the
	// driver messages of a request, results the driver's results of a
	// batch (see send.go and flush.go).
	pendings sync.Pool
	requests sync.Pool
	results  sync.Pool

	// settings and topics are immutable snapshots swapped by a reload; the
	// send path reads them without a lock.
	settings atomic.Pointer[settings]
	topics   atomic.Pointer[map[string]*topicState]

	// mu serializes reloads and route updates and guards the mutable parts
	// of topicState and clusterEntry, and clients.
	mu        sync.Mutex
	clients   map[string]wireClient
	clientSeq int
	// retired are clients no configuration uses any more, closed when their
	// timer fires or on Close, whichever comes first.
	retired map[wireClient]*time.Timer

	// active counts sends in progress (sync and async, retries included);
	// Close waits for it to reach zero before closing the accumulator.
	closed   atomic.Bool
	active   atomic.Int64
	idle     chan struct{}
	idleOnce sync.Once

	// Background work (route polling) runs under bgCtx and is counted in
	// bg; bgStopped (guarded by mu) keeps a late reload from starting more
	// once Close is waiting for it.
	bgCtx     context.Context
	bgCancel  context.CancelFunc
	bg        sync.WaitGroup
	bgStopped bool
}

// settings are the scalar parts of the configuration the send path reads.
type settings struct {
	batching       bool
	requestTimeout time.Duration
	slowRequest    time.Duration // 0: never
	sendDeadline   time.Duration
	rotateBytes    int64
	maxBody        int
	maxBuffered    int64
	shadowOn       bool // shadow.enabled: the kill switch of shadow sends
}

// routePollInterval is how often the producer looks at the routes of its
// clusters: the driver caches them and refreshes them from the servers, so
// a look costs a map read unless a cluster has no route yet, which is then
// asked for again.
const routePollInterval = time.Second

// New starts a producer. Exactly one of WithConfig, WithSource or
// WithWatcher must be given. New returns once the configuration is applied
// and the routes of its clusters were asked for (bounded by ctx); a cluster
// that does not answer yet is retried in the background and takes traffic
// once it does.
//
// A ctx that has ended before New, or while it waits for the first version
// of the configuration, fails New with an error wrapping ctx.Err(). A
// configuration that is invalid, unreadable or missing (a file source's
// file does not exist), or options that contradict each other, fail it with
// ErrInvalidConfig.
func New(ctx context.Context, opts ...Option) (*Producer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("producer: new: %w", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.Normalize(ErrInvalidConfig); err != nil {
		return nil, err
	}
	p := &Producer{
		opts:    o,
		log:     o.Logger,
		ids:     driver.NewMessageIDGenerator(),
		clients: map[string]wireClient{},
		retired: map[wireClient]*time.Timer{},
		idle:    make(chan struct{}),
	}
	empty := map[string]*topicState{}
	p.topics.Store(&empty)
	p.bgCtx, p.bgCancel = context.WithCancel(context.WithoutCancel(ctx))

	var err error
	switch {
	case o.Watcher != nil:
		p.watcher = o.Watcher
	default:
		src := o.Source
		if o.Config != nil {
			if err := o.Config.Validate(); err != nil {
				p.bgCancel()
				return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
			}
			src = config.Static(o.Config)
		}
		p.watcher, err = config.Start(ctx, src, config.Options{Logger: o.Logger, Registerer: o.Registerer, Name: "producer"})
		if err != nil {
			p.bgCancel()
			return nil, startError(ctx, err)
		}
		p.ownWatcher = true
	}
	fail := func(err error) (*Producer, error) {
		p.mu.Lock()
		p.bgStopped = true
		p.mu.Unlock()
		p.bgCancel()
		p.bg.Wait()
		if p.ownWatcher {
			_ = p.watcher.Close()
		}
		if p.acc != nil {
			_ = p.acc.Close(ctx)
		}
		p.closeClients(ctx)
		p.metrics.unregister()
		return nil, err
	}

	p.metrics, err = newMetrics(o.Registerer)
	if err != nil {
		return fail(err)
	}
	first := p.watcher.Current()
	p.acc, err = batch.New(batch.Config{
		Limits:     limitsOf(first),
		FailFast:   o.failFast,
		Logger:     o.Logger,
		Registerer: o.Registerer,
	}, p.flush)
	if err != nil {
		return fail(fmt.Errorf("%w: batching: %w", ErrInvalidConfig, err))
	}

	// Subscribe and apply under mu: a version accepted meanwhile is handed
	// to onConfig, which waits for mu and so applies after this one.
	p.mu.Lock()
	cur, rev, unsub := p.watcher.SubscribeVersion(p.onConfig)
	p.unsubscribe = unsub
	err = p.applyLocked(cur)
	if err == nil {
		p.cfgState.Applied(rev, time.Now())
	}
	p.mu.Unlock()
	if err != nil {
		unsub()
		return fail(err)
	}

	p.refreshAll(ctx)
	p.bg.Add(1)
	go p.routeLoop()
	return p, nil
}

// startError is the error of New when the configuration's watcher could not
// start: ctx's when ctx ended, ErrInvalidConfig otherwise (the source gave
// no usable document, or could not be watched at all).
func startError(ctx context.Context, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("producer: new: %w", err)
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
}

func limitsOf(cfg *config.Config) batch.Limits {
	return batch.Limits{
		MaxDelay:           cfg.Batching.MaxDelay.D(),
		BatchMaxBytes:      cfg.Batching.BatchMaxBytes,
		TotalBatchMaxBytes: cfg.Batching.TotalBatchMaxBytes,
	}
}

// onConfig applies a version the watcher accepted. If the producer cannot
// apply it (a client cannot be built for it, say), it keeps the previous
// one, like the watcher does with a document that fails validation.
func (p *Producer) onConfig(_, cur *config.Config) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return
	}
	if err := p.applyLocked(cur); err != nil {
		p.cfgState.Refused(p.watcher.Revision(), err, time.Now())
		p.metrics.configRejected()
		p.log.Error("producer could not apply the configuration; the previous one keeps serving", zap.Error(err))
		return
	}
	p.cfgState.Applied(p.watcher.Revision(), time.Now())
	p.log.Info("producer applied a new configuration", zap.Int("topics", len(cur.Topics)))
	// New clusters get their routes now rather than at the next poll.
	if !p.bgStopped {
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			p.refreshAll(p.bgCtx)
		}()
	}
}

// applyLocked makes cfg the configuration in force. Everything that can
// fail (new clients, new pickers) is built first; nothing in force changes
// until all of it succeeded. Sends in flight keep the topic and target they
// picked and finish on them.
func (p *Producer) applyLocked(cfg *config.Config) error {
	lim := limitsOf(cfg)
	st := &settings{
		batching:       cfg.Batching.Enabled,
		requestTimeout: cfg.Timeouts.Request.D(),
		sendDeadline:   cfg.Timeouts.SendDeadline.D(),
		rotateBytes:    stickyBatches * int64(max(cfg.Batching.BatchMaxBytes, batch.DefaultBatchMaxBytes)),
		maxBody:        DefaultMaxBodyBytes,
		maxBuffered:    lim.TotalBatchMaxBytes,
		shadowOn:       cfg.Shadow.Enabled,
	}
	if st.requestTimeout <= 0 {
		st.requestTimeout = config.DefaultRequestTimeout
	}
	switch slow := cfg.Failover.SlowRequest.D(); {
	case slow == 0:
		st.slowRequest = config.DefaultSlowRequest
	case slow > 0:
		st.slowRequest = slow
	}
	if st.sendDeadline <= 0 {
		st.sendDeadline = config.DefaultSendDeadline
	}
	if st.maxBuffered <= 0 {
		st.maxBuffered = batch.DefaultTotalBatchMaxBytes
	}

	old := *p.topics.Load()
	type plan struct {
		ts       *topicState
		clusters []*clusterEntry
		retune   bool // the failover tuning changed
		topic    config.Topic
	}
	var (
		plans      []plan
		newPickers []*failover.Picker[*brokerTarget]
		newClients = map[string]wireClient{}
		rollback   = func() {
			for _, pk := range newPickers {
				pk.Close()
			}
			for _, c := range newClients {
				p.closeInBackgroundLocked(c, st.requestTimeout)
			}
		}
	)
	for _, v := range variantsOf(cfg) {
		name, tc := v.key, v.topic
		ts := old[name]
		retune := false
		if ts == nil {
			picker, err := p.newPicker(name, cfg.Failover)
			if err != nil {
				rollback()
				return fmt.Errorf("topic %q: failover: %w", name, err)
			}
			newPickers = append(newPickers, picker)
			ts = &topicState{name: name, logic: v.logic, shadow: v.shadow, picker: picker, fcfg: cfg.Failover}
			if m := p.metrics; m != nil {
				ts.latency = m.sendLatency.WithLabelValues(v.logic, shadowLabel(v.shadow))
			}
		} else if ts.fcfg != cfg.Failover {
			// The live picker takes the new tuning at commit; check it
			// now, so that nothing changes if it is refused.
			if err := p.pickerConfig(name, cfg.Failover).Validate(); err != nil {
				rollback()
				return fmt.Errorf("topic %q: failover: %w", name, err)
			}
			retune = true
		}
		prev := ts.clusters
		var entries []*clusterEntry
		for _, cc := range tc.Clusters {
			physical := physicalOf(name, cc)
			key, cred := clientKeyOf(cfg, cc)
			var e *clusterEntry
			for _, pe := range prev {
				if pe.sameAs(cc, physical, key) {
					e = pe
					break
				}
			}
			if e == nil {
				client := p.clients[key]
				if client == nil {
					client = newClients[key]
				}
				if client == nil {
					var err error
					client, err = p.newClient(cfg, cc, cred, topicsOfClient(cfg, key))
					if err != nil {
						rollback()
						return fmt.Errorf("topic %q cluster %q: %w", name, cc.Name, err)
					}
					newClients[key] = client
				}
				e = &clusterEntry{name: cc.Name, endpoints: slices.Clone(cc.Endpoints), physical: physical, clientKey: key, client: client}
			}
			entries = append(entries, e)
		}
		plans = append(plans, plan{ts: ts, clusters: entries, retune: retune, topic: tc})
	}
	if err := p.acc.SetLimits(lim); err != nil {
		rollback()
		return fmt.Errorf("%w: batching: %w", ErrInvalidConfig, err)
	}

	// Commit.
	maps.Copy(p.clients, newClients)
	next := make(map[string]*topicState, len(plans))
	for i, pl := range plans {
		tc := pl.topic
		for j, e := range pl.clusters {
			// Weight and priority may change on a kept cluster.
			e.weight, e.priority = tc.Clusters[j].Weight, tc.Clusters[j].Priority
		}
		pl.ts.clusters = pl.clusters
		if pl.retune {
			if err := pl.ts.picker.Reconfigure(p.pickerConfig(pl.ts.name, cfg.Failover)); err != nil {
				// Checked above, so this is a bug; keep the old tuning.
				p.log.Error("failover tuning refused", zap.String("topic", pl.ts.name), zap.Error(err))
			} else {
				pl.ts.fcfg = cfg.Failover
			}
		}
		if err := pl.ts.picker.Update(pl.ts.resourcesLocked()); err != nil {
			// The configuration was validated, so this is a bug; keep
			// serving with the resources the picker had.
			p.log.Error("failover update refused", zap.String("topic", pl.ts.name), zap.Error(err))
		}
		pl.ts.spread.reset()
		next[pl.ts.name] = plans[i].ts
	}
	for name, ts := range old {
		if _, ok := next[name]; !ok {
			ts.picker.Close()
		}
	}
	p.settings.Store(st)
	p.topics.Store(&next)
	p.updateClientsLocked(next)
	return nil
}

// newClient creates a RocketMQ client for a cluster and one TLS and
// credentials setting, of the driver its protocol names: the gRPC driver
// (endpoints are proxies) or the remoting one (endpoints are name
// servers).
func (p *Producer) newClient(cfg *config.Config, cc config.Cluster, cred *driver.Credentials, topics []string) (wireClient, error) {
	p.clientSeq++
	clientID := fmt.Sprintf("%s@producer-%d", p.opts.Instance, p.clientSeq)
	if cc.Protocol.Remoting() {
		rc := remoting.ProducerConfig{
			Cluster:        cc.Name,
			NameServers:    slices.Clone(cc.Endpoints),
			Topics:         topics,
			RequestTimeout: cfg.Timeouts.Request.D(),
			ClientID:       clientID,
			// The broker asks a producer of the half message's group
			// (one per physical topic) on the connection it heartbeats.
			OnOrphanedTransaction: p.orphanHandler(),
			Credentials:           cred,
			Logger:                p.log,
		}
		if cc.TLS {
			rc.TLS = p.opts.TLS
			if rc.TLS == nil {
				rc.TLS = &tls.Config{}
			}
		}
		c, err := remoting.NewProducerClient(rc)
		if err != nil {
			return nil, fmt.Errorf("%w: remoting client: %w", ErrInvalidConfig, err)
		}
		return c, nil
	}
	dc := driver.Config{
		Cluster:        cc.Name,
		Type:           driver.Producer,
		Topics:         topics,
		RequestTimeout: cfg.Timeouts.Request.D(),
		Credentials:    cred,
		DialOptions:    p.opts.DialOptions,
		ClientID:       clientID,
		// Orphaned-transaction checks reach any producer client of the
		// topic: every client carries the checker.
		OnOrphanedTransaction: p.orphanHandler(),
		Logger:                p.log,
		Registerer:            p.opts.Registerer,
	}
	if cc.TLS {
		dc.TLS = p.opts.TLS
	}
	c, err := driver.New(dc)
	if err != nil {
		return nil, fmt.Errorf("%w: rocketmq client: %w", ErrInvalidConfig, err)
	}
	return c, nil
}

// topicsOfClient lists the physical topics of cfg's clusters that use the
// client of key, for the client's first Settings (a proxy refuses a
// producer that publishes nothing).
func topicsOfClient(cfg *config.Config, key string) []string {
	var out []string
	for _, v := range variantsOf(cfg) {
		for _, cc := range v.topic.Clusters {
			physical := physicalOf(v.key, cc)
			if k, _ := clientKeyOf(cfg, cc); k == key && !slices.Contains(out, physical) {
				out = append(out, physical)
			}
		}
	}
	slices.Sort(out)
	return out
}

// updateClientsLocked tells each client the physical topics it publishes
// (the server asks producers of a topic about orphaned transactions) and
// retires clients no cluster uses any more. A retired client is closed only
// after the longest a send could still use it.
func (p *Producer) updateClientsLocked(topics map[string]*topicState) {
	used := map[string][]string{}
	for _, ts := range topics {
		for _, c := range ts.clusters {
			if !slices.Contains(used[c.clientKey], c.physical) {
				used[c.clientKey] = append(used[c.clientKey], c.physical)
			}
		}
	}
	for key, c := range p.clients {
		ts, ok := used[key]
		if ok {
			slices.Sort(ts)
			if err := c.SetTopics(ts); err != nil {
				p.log.Warn("could not update the topics of a client", zap.Error(err))
			}
			continue
		}
		delete(p.clients, key)
		st := p.settings.Load()
		p.retired[c] = time.AfterFunc(st.sendDeadline+st.requestTimeout, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if _, ok := p.retired[c]; !ok || p.bgStopped {
				return // Close takes care of it
			}
			delete(p.retired, c)
			p.closeInBackgroundLocked(c, st.requestTimeout)
		})
	}
}

// closeInBackgroundLocked closes a client no configuration uses, without
// holding mu for the call. The goroutine is one of bg's: Close cancels
// bgCtx (so the client's goodbye to its brokers is cut short) and waits for
// it. Once bg is stopped nothing can be started on it, and the client is
// closed here with a context already canceled, which releases its
// connections at once.
func (p *Producer) closeInBackgroundLocked(c wireClient, timeout time.Duration) {
	if p.bgStopped {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Close(ctx)
		return
	}
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		ctx, cancel := context.WithTimeout(p.bgCtx, timeout)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			p.log.Debug("closing a rocketmq client no configuration uses", zap.Error(err))
		}
	}()
}

// routeLoop keeps the routes of every cluster current (see
// routePollInterval).
func (p *Producer) routeLoop() {
	defer p.bg.Done()
	t := time.NewTicker(routePollInterval)
	defer t.Stop()
	for {
		select {
		case <-p.bgCtx.Done():
			return
		case <-t.C:
			p.refreshAll(p.bgCtx)
		}
	}
}

// enter registers a send in progress; it fails once Close has begun.
func (p *Producer) enter() bool {
	p.active.Add(1)
	if p.closed.Load() {
		p.leave()
		return false
	}
	return true
}

func (p *Producer) leave() {
	if p.active.Add(-1) == 0 && p.closed.Load() {
		p.idleOnce.Do(func() { close(p.idle) })
	}
}

// Close stops accepting sends (they fail with ErrClosed), waits for the
// sends in progress to complete (everything buffered is flushed), then
// tells the servers the client is gone (NotifyClientTermination) and
// releases everything. If ctx ends first, sends still in flight fail and
// Close returns ctx's error. Clients that a reload left unused and that
// are being closed in the background are cut short and waited for: no
// goroutine of the producer outlives Close. Close is idempotent.
func (p *Producer) Close(ctx context.Context) error {
	if p.closed.Swap(true) {
		return nil
	}
	if p.active.Load() == 0 {
		p.idleOnce.Do(func() { close(p.idle) })
	}
	var errs []error
	select {
	case <-p.idle:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("producer: close: waiting for sends in progress: %w", ctx.Err()))
	}
	if err := p.acc.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	p.unsubscribe()
	if p.ownWatcher {
		_ = p.watcher.Close()
	}
	p.mu.Lock()
	p.bgStopped = true
	p.mu.Unlock()
	p.bgCancel()
	p.bg.Wait()
	p.mu.Lock()
	for _, ts := range *p.topics.Load() {
		ts.picker.Close()
	}
	p.mu.Unlock()
	p.closeClients(ctx)
	p.metrics.unregister()
	return errors.Join(errs...)
}

func (p *Producer) closeClients(ctx context.Context) {
	p.mu.Lock()
	clients := slices.Collect(maps.Values(p.clients))
	clear(p.clients)
	for c, t := range p.retired {
		t.Stop()
		clients = append(clients, c)
	}
	clear(p.retired)
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Close(ctx); err != nil {
				p.log.Debug("closing a rocketmq client", zap.Error(err))
			}
		}()
	}
	wg.Wait()
}
