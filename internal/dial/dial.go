package dial

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
)

// Kind is a kind of probe.
type Kind string

// Probe kinds.
const (
	Normal      Kind = "normal"
	Delayed     Kind = "delay"
	Transaction Kind = "transaction"
)

// Tag is the tag every probe carries and the dial group receives.
const Tag = "twinmq-dial"

// DefaultGroup is the dial's consumer group unless Options.Group says.
const DefaultGroup = "twinmq-dial"

// ErrInvalidOptions wraps every refusal of Options.
var ErrInvalidOptions = errors.New("dial: invalid options")

// ErrShadowUnavailable is wrapped by New's refusal of shadow mode
// (Options.Shadow) on a document that cannot carry it: the shadow kill
// switch is off, a dialled topic has no shadow topics, or there is no
// naming rule for shadow groups.
var ErrShadowUnavailable = errors.New("dial: shadow mode unavailable")

// Options configure a Dialer. Zero values mean the documented defaults.
type Options struct {
	// Rate is the probes per second sent to each broker, kinds taking turns
	// (default 1).
	Rate float64
	// BodySize is the size of a probe's body in bytes (default 128).
	BodySize int
	// Period is the reconciliation period: a probe not received Period
	// after it was due is lost (default 10 s).
	Period time.Duration
	// Delay is how far ahead delayed probes are due (default 1 s).
	Delay time.Duration
	// Kinds to send (default all three).
	Kinds []Kind
	// Topics restricts the probed logic topics (default every topic of the
	// document).
	Topics []string
	// Group is the dial's consumer group (default DefaultGroup). In shadow
	// mode the dial consumes in its shadow group (config.ShadowGroup).
	Group string
	// Shadow is the stress mode: every probe goes to the shadow physical
	// topic of each cluster (config.ShadowTopic), carries the shadow marker
	// (lane.PropertyShadow) and is consumed in the shadow group of Group,
	// so a high Rate stays out of the production topics. New refuses it
	// (ErrShadowUnavailable) unless the document's shadow kill switch is on
	// and every dialled topic has shadow topics; a reload that turns the
	// switch off, or takes a topic's shadow topics away, stops the probes
	// concerned until a reload brings them back. A probe never falls back
	// to a production topic.
	Shadow bool
	// MaxP99, when set, makes a broker whose p99 latency is above it
	// report; zero leaves latency out of the reports.
	MaxP99 time.Duration
	// LongPolling of the dial's receives (default 5 s, the protocol's
	// floor).
	LongPolling time.Duration
	// InvisibleDuration of received probes until their ack (default 30 s).
	InvisibleDuration time.Duration
	// RouteInterval between reads of each cluster's route (default 30 s).
	RouteInterval time.Duration
	// TLS is used for clusters whose document entry sets tls.
	TLS *tls.Config
	// OnReport, when set, is called with every report, on the reconciling
	// goroutine (keep it short).
	OnReport func(Report)
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Registerer receives the twinmq_dial_* metrics; nil means none.
	Registerer prometheus.Registerer
}

func (o *Options) fill() error {
	var errs []error
	if o.Rate == 0 {
		o.Rate = 1
	}
	if o.Rate < 0 || o.Rate > 10000 {
		errs = append(errs, fmt.Errorf("rate %v: want 0 < rate <= 10000", o.Rate))
	}
	if o.BodySize == 0 {
		o.BodySize = 128
	}
	if o.BodySize < 0 || o.BodySize > 4<<20 {
		errs = append(errs, fmt.Errorf("body size %d: want 0 < size <= 4 MiB", o.BodySize))
	}
	def := func(d *time.Duration, v time.Duration, name string) {
		if *d == 0 {
			*d = v
		}
		if *d < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", name, *d))
		}
	}
	def(&o.Period, 10*time.Second, "period")
	def(&o.Delay, time.Second, "delay")
	def(&o.LongPolling, 5*time.Second, "long polling")
	def(&o.InvisibleDuration, 30*time.Second, "invisible duration")
	def(&o.RouteInterval, 30*time.Second, "route interval")
	def(&o.MaxP99, 0, "max p99")
	if len(o.Kinds) == 0 {
		o.Kinds = []Kind{Normal, Delayed, Transaction}
	}
	for _, k := range o.Kinds {
		if k != Normal && k != Delayed && k != Transaction {
			errs = append(errs, fmt.Errorf("kind %q: want normal, delay or transaction", k))
		}
	}
	if o.Group == "" {
		o.Group = DefaultGroup
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return nil
}

// Broker identifies one probed broker.
type Broker struct {
	Topic    string // logic topic
	Cluster  string
	Broker   string // broker name in the route
	Endpoint string
}

func (b Broker) String() string {
	return b.Topic + "/" + b.Cluster + "/" + b.Broker + "@" + b.Endpoint
}

// Report is one reconciliation tick that found trouble on a broker.
type Report struct {
	Broker Broker
	At     time.Time
	// New since the previous tick.
	Lost, Duplicated, SendErrors uint64
	// P99 over the last two periods, and whether it broke MaxP99.
	P99     time.Duration
	SlowP99 bool
	// LastError is the broker's latest send or receive error, if any.
	LastError string
}

// Status is what the dial knows of one broker.
type Status struct {
	Broker
	Sent, Received, Lost, Duplicated, Late, SendErrors uint64
	P50, P99                                           time.Duration
	Up                                                 bool
	LastError                                          string
	LastErrorAt                                        time.Time
	Reports                                            uint64
}

// Dialer runs the dial test until Close.
type Dialer struct {
	opts    Options
	log     *zap.Logger
	m       *metrics
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	unsub   func()
	applyMu sync.Mutex // orders applies (reloads) with Close

	mu      sync.Mutex
	runners map[string]*runner // by topic + "\x00" + cluster signature
	brokers map[Broker]*brokerState
	probes  map[string]*probe // by message id: pending, then received or lost
	closed  bool
}

// New starts a Dialer on the document w holds and follows its reloads. It
// returns once the probing started; brokers come in as their routes are read.
func New(ctx context.Context, w *config.Watcher, opts Options) (*Dialer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if w == nil {
		return nil, fmt.Errorf("%w: nil config watcher", ErrInvalidOptions)
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	d := &Dialer{
		opts: opts, log: opts.Logger, m: m,
		runners: map[string]*runner{},
		brokers: map[Broker]*brokerState{},
		probes:  map[string]*probe{},
	}
	d.ctx, d.stop = context.WithCancel(context.Background())
	d.applyMu.Lock()
	cur, unsub := w.Subscribe(func(_, cfg *config.Config) {
		d.applyMu.Lock()
		defer d.applyMu.Unlock()
		d.apply(cfg)
	})
	d.unsub = unsub
	if err := d.shadowReady(cur); err != nil {
		d.closed = true // a reload racing this return starts nothing
		d.applyMu.Unlock()
		unsub()
		d.m.unregister()
		return nil, err
	}
	d.apply(cur)
	d.applyMu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.reconcileLoop()
	}()
	return d, nil
}

// Close stops probing, waits for every goroutine and closes the clients,
// bounded by ctx, and removes the dial's series.
func (d *Dialer) Close(ctx context.Context) error {
	d.unsub()
	d.applyMu.Lock()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.applyMu.Unlock()
		return nil
	}
	d.closed = true
	runners := d.runners
	d.runners = map[string]*runner{}
	d.mu.Unlock()
	d.applyMu.Unlock()
	d.stop()
	var errs []error
	for _, r := range runners {
		errs = append(errs, r.close(ctx))
	}
	d.wg.Wait()
	d.m.unregister()
	return errors.Join(errs...)
}

// Status returns every known broker's status, sorted.
func (d *Dialer) Status() []Status {
	d.mu.Lock()
	out := make([]Status, 0, len(d.brokers))
	for _, b := range d.brokers {
		out = append(out, b.status())
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Broker.String() < out[j].Broker.String() })
	return out
}

// dialled reports whether the logic topic is one the options ask for.
func (d *Dialer) dialled(topic string) bool {
	return len(d.opts.Topics) == 0 || slices.Contains(d.opts.Topics, topic)
}

// shadowGroup returns the group the dial consumes in under cfg: Group, or
// in shadow mode its shadow group, with an error wrapping
// ErrShadowUnavailable when cfg has the shadow kill switch off or no
// naming rule for shadow groups.
func (d *Dialer) shadowGroup(cfg *config.Config) (string, error) {
	if !d.opts.Shadow {
		return d.opts.Group, nil
	}
	if !cfg.Shadow.Enabled {
		return "", fmt.Errorf("%w: the document's shadow kill switch (shadow.enabled) is off", ErrShadowUnavailable)
	}
	g, ok := cfg.ShadowGroup(d.opts.Group)
	if !ok {
		return "", fmt.Errorf("%w: the document has no shadow group rule (shadow.groupPrefix or groupSuffix)", ErrShadowUnavailable)
	}
	return g, nil
}

// shadowReady is New's check of shadow mode against the first document:
// the kill switch is on, and every dialled topic of the document has
// shadow topics. A dialled topic the document does not name yet is not
// checked: it is probed when a reload brings it, if it has shadow topics.
func (d *Dialer) shadowReady(cfg *config.Config) error {
	if !d.opts.Shadow {
		return nil
	}
	if _, err := d.shadowGroup(cfg); err != nil {
		return err
	}
	var missing []string
	for name := range cfg.Topics {
		if d.dialled(name) && !cfg.HasShadow(name) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("%w: no shadow topics for the dialled topic(s) %v (set clusters' shadowTopic, or a shadow.topicPrefix/topicSuffix rule, or leave them out of the dialled topics)",
			ErrShadowUnavailable, missing)
	}
	return nil
}

// apply starts runners for the (topic, cluster) pairs of cfg that have none
// and stops those that left or changed. In shadow mode a document with the
// kill switch off leaves no pair, and a topic without shadow topics is left
// out: its runners stop, none goes to its production topic.
func (d *Dialer) apply(cfg *config.Config) {
	want := map[string]runnerSpec{}
	group, err := d.shadowGroup(cfg)
	if err != nil {
		d.log.Warn("shadow probing stopped", zap.Error(err))
	}
	for name, t := range cfg.Topics {
		if err != nil || !d.dialled(name) {
			continue
		}
		if d.opts.Shadow && !cfg.HasShadow(name) {
			d.log.Warn("not probing a topic without shadow topics", zap.String("topic", name))
			continue
		}
		for _, c := range t.Clusters {
			s := runnerSpec{topic: name, cluster: c.Name, physical: c.Topic,
				endpoints: slices.Clone(c.Endpoints), tls: c.TLS, group: group, shadow: d.opts.Shadow,
				requestTimeout: time.Duration(cfg.Timeouts.Request)}
			if s.shadow {
				s.physical, _ = cfg.ShadowTopic(name, c)
			}
			if c.Credentials != "" {
				cr := cfg.Credentials[c.Credentials]
				s.cred = &driver.Credentials{AccessKey: cr.AccessKey, SecretKey: cr.AccessSecret}
			}
			want[s.key()] = s
		}
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	var gone []*runner
	for k, r := range d.runners {
		if _, ok := want[k]; !ok {
			gone = append(gone, r)
			delete(d.runners, k)
		}
	}
	var fresh []runnerSpec
	for k, s := range want {
		if _, ok := d.runners[k]; !ok {
			fresh = append(fresh, s)
		}
	}
	d.mu.Unlock()
	for _, r := range gone {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.close(cctx); err != nil {
			d.log.Debug("closing a dial runner", zap.Error(err))
		}
		cancel()
		d.forget(r.spec.topic, r.spec.cluster)
		d.log.Info("stopped probing", zap.String("topic", r.spec.topic), zap.String("cluster", r.spec.cluster))
	}
	for _, s := range fresh {
		r, err := d.newRunner(s)
		if err != nil {
			d.log.Error("cannot probe a cluster", zap.String("topic", s.topic), zap.String("cluster", s.cluster), zap.Error(err))
			continue
		}
		d.mu.Lock()
		d.runners[s.key()] = r
		d.mu.Unlock()
		d.log.Info("probing", zap.String("topic", s.topic), zap.String("cluster", s.cluster),
			zap.String("physical_topic", s.physical))
	}
}

// forget drops the brokers of a (topic, cluster) that is no longer probed,
// with their probes and series.
func (d *Dialer) forget(topic, cluster string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, b := range d.brokers {
		if k.Topic == topic && k.Cluster == cluster {
			delete(d.brokers, k)
			b.series.delete()
		}
	}
	for id, p := range d.probes {
		if p.b.key.Topic == topic && p.b.key.Cluster == cluster {
			delete(d.probes, id)
		}
	}
}

// broker returns the state of k, creating it.
func (d *Dialer) broker(k Broker) *brokerState {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.brokers[k]
	if b == nil {
		b = &brokerState{key: k, series: d.m.seriesOf(k), up: true}
		b.series.up(true)
		d.brokers[k] = b
	}
	return b
}

// probe is one probe message in the books.
type probe struct {
	b    *brokerState
	kind Kind
	// start is when its send began; due when it can be received (the send
	// or commit returned, or the delivery time of a delayed probe); zero
	// while the send runs.
	start, due time.Time
	state      probeState
	// at is when it was received or declared lost (for pruning).
	at time.Time
}

type probeState int

const (
	pending probeState = iota
	received
	lost
)

// sending records a probe whose send is starting.
func (d *Dialer) sending(id string, b *brokerState, k Kind, now time.Time) {
	d.mu.Lock()
	d.probes[id] = &probe{b: b, kind: k, start: now}
	b.sent++
	d.mu.Unlock()
	b.series.sent(k)
}

// sent records the outcome of a probe's send: due is when it can arrive,
// or err says why it was not sent.
func (d *Dialer) sent(id string, due time.Time, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.probes[id]
	if p == nil {
		return
	}
	if err != nil {
		p.b.sendErrs++
		p.b.newSendErrs++
		p.b.setErr(err, time.Now())
		p.b.series.sendError(p.kind)
		if p.state == pending {
			delete(d.probes, id)
		}
		return
	}
	if p.state == pending {
		p.due = due
	}
}

// arrived records the receipt of message id at now.
func (d *Dialer) arrived(id string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.probes[id]
	if p == nil {
		return // not ours, or older than the books
	}
	b := p.b
	switch p.state {
	case received:
		b.dups++
		b.newDups++
		b.series.duplicated(p.kind)
		return
	case lost:
		b.late++
		p.state, p.at = received, now
		b.series.late(p.kind)
		return
	}
	p.state, p.at = received, now
	b.received++
	b.series.received(p.kind)
	due := p.due
	if due.IsZero() {
		due = p.start // the send's answer is still on its way
	}
	lat := max(now.Sub(due), 0)
	if p.kind == Delayed {
		b.series.lateness(lat)
		return
	}
	b.lat = append(b.lat, sample{at: now, d: lat})
	b.series.latency(p.kind, lat)
}

// receiveError notes a failed receive on b.
func (d *Dialer) receiveError(b *brokerState, err error) {
	d.mu.Lock()
	b.setErr(err, time.Now())
	d.mu.Unlock()
}

func (d *Dialer) reconcileLoop() {
	tick := time.NewTicker(max(d.opts.Period/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case now := <-tick.C:
			for _, r := range d.reconcile(now) {
				d.log.Warn("dial report", zap.Stringer("broker", r.Broker), zap.Uint64("lost", r.Lost),
					zap.Uint64("duplicated", r.Duplicated), zap.Uint64("send_errors", r.SendErrors),
					zap.Duration("p99", r.P99), zap.String("last_error", r.LastError))
				if d.opts.OnReport != nil {
					d.opts.OnReport(r)
				}
			}
		}
	}
}

// reconcile declares lost the probes overdue at now, computes each broker's
// percentiles and returns the reports of this tick.
func (d *Dialer) reconcile(now time.Time) []Report {
	period := d.opts.Period
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, p := range d.probes {
		switch p.state {
		case pending:
			ref := p.due
			if ref.IsZero() {
				ref = p.start // a send still waiting for its answer
			}
			if now.Sub(ref) > period {
				p.state, p.at = lost, now
				p.b.lost++
				p.b.newLost++
				p.b.series.lost(p.kind)
			}
		default:
			// Kept to tell duplicates and late arrivals apart, for ten
			// periods.
			if now.Sub(p.at) > 10*period {
				delete(d.probes, id)
			}
		}
	}
	var reports []Report
	for _, b := range d.brokers {
		b.prune(now.Add(-2 * period))
		b.p50, b.p99 = b.percentiles()
		b.series.percentiles(b.p50, b.p99)
		slow := d.opts.MaxP99 > 0 && b.p99 > d.opts.MaxP99
		if b.newLost > 0 || b.newDups > 0 || b.newSendErrs > 0 || slow {
			reports = append(reports, Report{Broker: b.key, At: now, Lost: b.newLost, Duplicated: b.newDups,
				SendErrors: b.newSendErrs, P99: b.p99, SlowP99: slow, LastError: b.lastErr})
			b.newLost, b.newDups, b.newSendErrs = 0, 0, 0
			b.reports++
			b.lastTrouble = now
			b.series.report()
		}
		// Down while a report is less than a period old: a broker whose
		// sends fail every few seconds stays down between its reports.
		b.up = b.lastTrouble.IsZero() || now.Sub(b.lastTrouble) >= period
		b.series.up(b.up)
	}
	return reports
}

type sample struct {
	at time.Time
	d  time.Duration
}

// brokerState is the books of one broker, guarded by Dialer.mu.
type brokerState struct {
	key                              Broker
	series                           *series
	sent, received, lost, dups, late uint64
	sendErrs, reports                uint64
	newLost, newDups, newSendErrs    uint64
	lat                              []sample // last two periods
	p50, p99                         time.Duration
	up                               bool
	lastErr                          string
	lastErrAt                        time.Time
	lastTrouble                      time.Time // the latest report
}

func (b *brokerState) setErr(err error, now time.Time) {
	b.lastErr, b.lastErrAt = err.Error(), now
}

// prune drops the latency samples older than since.
func (b *brokerState) prune(since time.Time) {
	i := 0
	for i < len(b.lat) && b.lat[i].at.Before(since) {
		i++
	}
	if i > 0 {
		b.lat = append(b.lat[:0], b.lat[i:]...)
	}
}

// percentiles returns the p50 and p99 of the samples (nearest rank).
func (b *brokerState) percentiles() (p50, p99 time.Duration) {
	if len(b.lat) == 0 {
		return 0, 0
	}
	ds := make([]time.Duration, len(b.lat))
	for i, s := range b.lat {
		ds[i] = s.d
	}
	slices.Sort(ds)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return rank(0.50), rank(0.99)
}

func (b *brokerState) status() Status {
	return Status{Broker: b.key, Sent: b.sent, Received: b.received, Lost: b.lost, Duplicated: b.dups,
		Late: b.late, SendErrors: b.sendErrs, P50: b.p50, P99: b.p99, Up: b.up,
		LastError: b.lastErr, LastErrorAt: b.lastErrAt, Reports: b.reports}
}
