package config

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/promreg"
)

// ErrSourceEnded is returned by Start when the source closed its channel
// before yielding any version.
var ErrSourceEnded = errors.New("config: source ended before yielding a version")

// Options configure a Watcher. The zero value is ready to use.
type Options struct {
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Registerer receives the reload metrics; nil means no metrics.
	Registerer prometheus.Registerer
	// Name is the "watcher" label of the reload metrics (a producer's own
	// watcher is "producer", a consumer's "consumer/<group>/<topic>").
	// Watchers sharing a Registerer share the series of their name, and
	// Close removes them: give watchers that live apart distinct names.
	Name string
}

// Results counted by twinmq_config_reloads_total.
const (
	ResultAccepted  = "accepted"
	ResultRejected  = "rejected"
	ResultUnchanged = "unchanged"
)

type state struct {
	cfg *Config
	rev string
}

type subscription struct {
	id   uint64
	fn   func(old, new *Config)
	gone atomic.Bool // set by cancel; checked before every call
}

// Watcher holds the current configuration and keeps it up to date from a
// Source: each version is validated, then swapped in atomically; a bad one
// is logged, counted and dropped while the last good one keeps serving.
// Current never blocks and never sees a half-applied document.
type Watcher struct {
	log     *zap.Logger
	metrics *metrics

	cur     atomic.Pointer[state]
	lastErr atomic.Pointer[error]
	hist    history
	// oneShot: the source ends by design after its versions (Static).
	oneShot bool

	// subMu orders swaps with Subscribe, so a subscriber gets exactly the
	// versions after the one Subscribe returned. It is not held while
	// subscribers run, so they may Subscribe or cancel from their callback.
	subMu  sync.Mutex
	subs   []*subscription // in subscription order
	subSeq uint64

	cancel context.CancelFunc
	done   chan struct{}
}

// Start watches src and returns once the first version is accepted. The
// first version must be good: a rejected first version or a source that
// ends first fails Start with an error wrapping ErrInvalidConfig, since a
// producer cannot run on no configuration. A ctx that has ended, before
// Start or while it waits, fails Start with an error wrapping ctx.Err()
// (and not ErrInvalidConfig), even when a version is ready at once. ctx
// bounds only this wait; the Watcher then runs until Close.
func Start(ctx context.Context, src Source, opts Options) (*Watcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("config: start: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	m, err := newMetrics(opts.Registerer, opts.Name)
	if err != nil {
		return nil, err
	}
	w := &Watcher{log: opts.Logger, metrics: m, done: make(chan struct{})}
	_, w.oneShot = src.(oneShotSource)

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ch, err := src.Watch(runCtx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("config: start watching: %w", err)
	}
	w.cancel = cancel
	// A version may be ready at once (a static source) while ctx has ended
	// too: select would pick either. ctx is looked at again after the
	// version, so an ended ctx always fails Start.
	select {
	case v, ok := <-ch:
		if err := ctx.Err(); err != nil {
			cancel()
			return nil, fmt.Errorf("config: waiting for the first version: %w", err)
		}
		if !ok {
			cancel()
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, ErrSourceEnded)
		}
		if err := w.apply(v); err != nil {
			cancel()
			if !errors.Is(err, ErrInvalidConfig) {
				// An unreadable or missing document: there is no
				// configuration to start on either.
				err = invalid{err}
			}
			return nil, fmt.Errorf("config: first version rejected: %w", err)
		}
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("config: waiting for the first version: %w", ctx.Err())
	}
	go w.run(runCtx, ch)
	return w, nil
}

// invalid is an error that matches ErrInvalidConfig without repeating its
// text.
type invalid struct{ err error }

func (e invalid) Error() string   { return e.err.Error() }
func (e invalid) Unwrap() []error { return []error{ErrInvalidConfig, e.err} }

func (w *Watcher) run(ctx context.Context, ch <-chan Version) {
	defer close(w.done)
	for {
		select {
		case <-ctx.Done():
			return
		case v, ok := <-ch:
			if !ok {
				if ctx.Err() == nil {
					// A fixed document ends after its one version, as it
					// should; any other source ending means no more reloads.
					level := zap.InfoLevel
					if w.oneShot {
						level = zap.DebugLevel
					}
					w.log.Log(level, "config source ended; keeping the last good configuration",
						zap.String("revision", w.Revision()))
				}
				return
			}
			_ = w.apply(v) // a rejection is logged and counted by apply
		}
	}
}

// apply validates v and swaps it in, or rejects it.
func (w *Watcher) apply(v Version) error {
	err := v.Err
	if err == nil && v.Config == nil {
		err = fmt.Errorf("version %q has no document: %w", v.Revision, ErrInvalidConfig)
	}
	if err == nil {
		err = v.Config.Validate()
	}
	if err != nil {
		w.lastErr.Store(&err)
		w.hist.refused(v.Revision, err, time.Now())
		w.metrics.count(ResultRejected)
		w.log.Error("config version rejected; the last good configuration keeps serving",
			zap.String("revision", v.Revision), zap.String("serving", w.Revision()), zap.Error(err))
		return err
	}
	w.subMu.Lock()
	old := w.cur.Load()
	if old != nil && v.Revision != "" && old.rev == v.Revision {
		w.subMu.Unlock()
		// The latest version is good: it is the one serving. Clear the
		// error of a rejected one before it (a config file deleted and put
		// back as it was), or a health check would stay red for good.
		w.lastErr.Store(nil)
		w.hist.accepted(time.Now(), false)
		w.metrics.count(ResultUnchanged)
		return nil
	}
	w.cur.Store(&state{cfg: v.Config, rev: v.Revision})
	// The subscribers of this version are those registered before the swap;
	// one registered after it got this version from Subscribe. Versions are
	// applied on one goroutine, so notifications stay in order.
	subs := slices.Clone(w.subs)
	w.subMu.Unlock()
	w.lastErr.Store(nil)
	w.hist.accepted(time.Now(), true)
	w.metrics.count(ResultAccepted)
	w.metrics.accepted()
	var oldCfg *Config
	if old != nil {
		oldCfg = old.cfg
		w.log.Info("config version accepted", zap.String("revision", v.Revision), zap.String("previous", old.rev))
	}
	for _, sub := range subs {
		if !sub.gone.Load() {
			w.notify(sub, oldCfg, v.Config)
		}
	}
	return nil
}

// notify runs one subscriber, containing its panic: a broken subscriber
// must not stop the reloads of everyone else.
func (w *Watcher) notify(sub *subscription, old, cur *Config) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("config subscriber panicked", zap.Uint64("subscriber", sub.id), zap.Any("panic", r))
		}
	}()
	sub.fn(old, cur)
}

// Current returns the configuration in force. It never returns nil on a
// started Watcher.
func (w *Watcher) Current() *Config { return w.cur.Load().cfg }

// Revision returns the revision of the configuration in force.
func (w *Watcher) Revision() string {
	if s := w.cur.Load(); s != nil {
		return s.rev
	}
	return ""
}

// LastError returns why the latest version was rejected, or nil when the
// latest version was accepted or equals the one serving: a health check can
// surface it.
func (w *Watcher) LastError() error {
	if p := w.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Subscribe registers fn for every version accepted from now on, and
// returns the configuration in force at registration, so the subscriber
// misses nothing between reading it and being called. fn runs on the
// Watcher's goroutine, one version at a time and in order, with the
// previous and the new document; it should be quick (hand heavy work to
// another goroutine), since the next reload waits for it. fn may call
// Subscribe and cancel functions, its own included. The returned cancel
// function unsubscribes: fn is not called for any version after cancel
// returns (a call already running on the Watcher's goroutine finishes).
func (w *Watcher) Subscribe(fn func(old, new *Config)) (current *Config, cancel func()) {
	current, _, cancel = w.SubscribeVersion(fn)
	return current, cancel
}

// SubscribeVersion is Subscribe that also returns the revision of the
// configuration in force at registration. During fn, Revision is the
// revision of the new document.
func (w *Watcher) SubscribeVersion(fn func(old, new *Config)) (current *Config, revision string, cancel func()) {
	w.subMu.Lock()
	defer w.subMu.Unlock()
	w.subSeq++
	sub := &subscription{id: w.subSeq, fn: fn}
	w.subs = append(w.subs, sub)
	st := w.cur.Load()
	return st.cfg, st.rev, func() {
		sub.gone.Store(true)
		w.subMu.Lock()
		defer w.subMu.Unlock()
		if i := slices.Index(w.subs, sub); i >= 0 {
			w.subs = slices.Delete(w.subs, i, i+1)
		}
	}
}

// Close stops watching, waits for the watcher's goroutine and removes the
// series of its name. Current keeps answering with the last good
// configuration.
func (w *Watcher) Close() error {
	w.cancel()
	<-w.done
	w.metrics.remove()
	return nil
}

type metrics struct {
	reloads *prometheus.CounterVec // watcher, result
	last    *prometheus.GaugeVec   // watcher
	name    string
}

func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "twinmq", Subsystem: "config", Name: "reloads_total",
		Help: "Configuration versions seen, by watcher and result: accepted, rejected (the last good one kept serving), unchanged.",
	}, []string{"watcher", "result"})
	last := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "twinmq", Subsystem: "config", Name: "last_accepted_timestamp_seconds",
		Help: "Unix time of the last accepted configuration version, by watcher.",
	}, []string{"watcher"})
	var err error
	if reloads, err = register(reg, reloads); err != nil {
		return nil, err
	}
	if last, err = register(reg, last); err != nil {
		return nil, err
	}
	return &metrics{reloads: reloads, last: last, name: name}, nil
}

// remove deletes the watcher's series (Close).
func (m *metrics) remove() {
	if m != nil {
		m.reloads.DeletePartialMatch(prometheus.Labels{"watcher": m.name})
		m.last.DeleteLabelValues(m.name)
	}
}

// register registers c, or reuses the collector already registered under
// the same name, so several Watchers may share one Registerer (see
// promreg).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	c, err := promreg.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("config: register metrics: %w", err)
	}
	return c, nil
}

func (m *metrics) count(result string) {
	if m != nil {
		m.reloads.WithLabelValues(m.name, result).Inc()
	}
}

func (m *metrics) accepted() {
	if m != nil {
		m.last.WithLabelValues(m.name).SetToCurrentTime()
	}
}
