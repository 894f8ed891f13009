package etcd

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
)

// Source is a config.Source over one etcd key holding the configuration
// document (the JSON that config.Parse reads). See the package doc.
type Source struct {
	cli    *clientv3.Client
	key    string
	log    *zap.Logger
	met    *sourceMetrics
	health *health

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ config.Source = (*Source)(nil)

// NewSource returns a source of the document at key and checks that etcd
// answers: it fails, wrapping ErrUnavailable and ctx's error, when ctx
// ends first. A missing key is no error here: the first version then
// says so (ErrNoDocument), and a producer or consumer refuses to start on
// it. The source does not close cli; close the source first.
func NewSource(ctx context.Context, cli *clientv3.Client, key string, opts Options) (*Source, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil etcd client", ErrInvalidOptions)
	}
	if key == "" {
		return nil, fmt.Errorf("%w: empty configuration key", ErrInvalidOptions)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	met, err := newSourceMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	if err := reach(ctx, cli, key); err != nil {
		return nil, err
	}
	log := opts.Logger.With(zap.String("key", key))
	s := &Source{cli: cli, key: key, log: log, met: met, health: newHealth("config source", log, met.connected, met.outages)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.health.monitor(s.ctx, cli.ActiveConnection())
	}()
	return s, nil
}

// Close ends every watch (their channels close) and waits for the
// source's goroutines.
func (s *Source) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// Watch implements config.Source: the current version at once (read from
// etcd, retried until it answers or ctx ends), then one per change of the
// key. A version's revision is the key's mod revision in decimal; after
// etcd came back with older revisions (restored or rebuilt) it carries a
// suffix "/e<N>", N the number of such returns this watch saw, so that an
// equal revision still means an equal document. A deleted key gives a
// version with ErrNoDocument, which a Watcher rejects, keeping the last
// good document.
func (s *Source) Watch(ctx context.Context) (<-chan config.Version, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: the source is closed", ErrInvalidOptions)
	}
	out := make(chan config.Version)
	wctx, cancel := context.WithCancel(s.ctx)
	stop := context.AfterFunc(ctx, cancel)
	f := &follower{cli: s.cli, health: s.health, log: s.log, key: s.key, resyncs: s.met.resyncs}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer stop()
		defer cancel()
		w := &keyWatch{s: s, ctx: wctx, out: out}
		f.run(wctx, w.load, w.apply)
	}()
	return out, nil
}

// keyWatch is the state of one Watch.
type keyWatch struct {
	s      *Source
	ctx    context.Context
	out    chan config.Version
	epoch  int    // how often the store went back
	last   string // revision of the last version sent; "" for none
	absent bool   // the last version sent said the key is missing
}

func (w *keyWatch) load(kvs []*mvccpb.KeyValue, _ int64, reset bool) bool {
	if reset {
		w.epoch++
	}
	if len(kvs) == 0 {
		if w.absent {
			return true
		}
		return w.emitMissing()
	}
	return w.emit(kvs[0])
}

func (w *keyWatch) apply(evs []*clientv3.Event, _ int64) bool {
	for _, ev := range evs {
		var ok bool
		if ev.Type == mvccpb.DELETE {
			ok = w.emitMissing()
		} else {
			ok = w.emit(ev.Kv)
		}
		if !ok {
			return false
		}
	}
	return true
}

func (w *keyWatch) revision(modRev int64) string {
	r := strconv.FormatInt(modRev, 10)
	if w.epoch > 0 {
		r += "/e" + strconv.Itoa(w.epoch)
	}
	return r
}

// emit sends the version kv holds, unless it is the one sent last (a
// read after an outage finds the same key again).
func (w *keyWatch) emit(kv *mvccpb.KeyValue) bool {
	rev := w.revision(kv.ModRevision)
	if rev == w.last && !w.absent {
		return true
	}
	v := config.Version{Revision: rev}
	v.Config, v.Err = config.Parse(kv.Value)
	if v.Err != nil {
		v.Config = nil
		v.Err = fmt.Errorf("etcd key %s at revision %d: %w", w.s.key, kv.ModRevision, v.Err)
	}
	w.last, w.absent = rev, false
	return w.send(v)
}

func (w *keyWatch) emitMissing() bool {
	w.absent = true
	return w.send(config.Version{Err: fmt.Errorf("%w at key %s", ErrNoDocument, w.s.key)})
}

func (w *keyWatch) send(v config.Version) bool {
	w.s.met.versions.Inc()
	select {
	case w.out <- v:
		return true
	case <-w.ctx.Done():
		return false
	}
}

type sourceMetrics struct {
	connected prometheus.Gauge
	outages   prometheus.Counter
	resyncs   prometheus.Counter
	versions  prometheus.Counter
}

func newSourceMetrics(reg prometheus.Registerer) (*sourceMetrics, error) {
	m := &sourceMetrics{versions: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "twinmq_etcd_config_versions_total",
		Help: "Versions of the configuration key handed to the watcher (good or not).",
	})}
	m.connected, m.outages, m.resyncs = healthMetrics("config", "the config source", "the configuration key")
	if err := registerAll(reg, m.connected, m.outages, m.resyncs, m.versions); err != nil {
		return nil, err
	}
	return m, nil
}
