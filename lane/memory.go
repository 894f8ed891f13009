package lane

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Clock is the time source of a MemoryRegistry; tests inject a fake one.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f in its own goroutine after d and returns a function
	// that cancels it (reporting whether it stopped f from running).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// MemoryOptions configure a MemoryRegistry. The zero value is ready to use.
type MemoryOptions struct {
	// Clock defaults to the system clock.
	Clock Clock
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
}

// MemoryRegistry is an in-process Registry for tests and the embedded
// setup. Leases expire by TTL on its Clock: a timer armed for the earliest
// expiry removes expired instances and notifies watchers, and every call
// also drops what has expired, so no caller ever sees a dead instance even
// if the timer runs late. It is safe for concurrent use.
type MemoryRegistry struct {
	clock Clock
	log   *zap.Logger

	closing chan struct{} // closed by Close, ends the watch goroutines

	mu       sync.Mutex
	closed   bool
	rev      int64
	leaseSeq uint64
	groups   map[string]map[string]*entry // group -> instance ID -> entry
	watchers map[string]map[*watcher]struct{}
	timerAt  time.Time
	timerGen uint64
	stop     func() bool
}

type entry struct {
	inst    Instance
	lease   uint64
	ttl     time.Duration
	expires time.Time
}

type watcher struct {
	ch chan Snapshot
}

// NewMemoryRegistry returns an empty registry.
func NewMemoryRegistry(opts MemoryOptions) *MemoryRegistry {
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &MemoryRegistry{
		clock:    opts.Clock,
		log:      opts.Logger,
		closing:  make(chan struct{}),
		groups:   map[string]map[string]*entry{},
		watchers: map[string]map[*watcher]struct{}{},
	}
}

var _ Registry = (*MemoryRegistry)(nil)

// Register implements Registry. A registration with the group and ID of a
// live one replaces it; the old lease then fails with ErrLeaseExpired.
func (r *MemoryRegistry) Register(ctx context.Context, inst Instance, ttl time.Duration) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := inst.validate(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("group %q instance %q: ttl %v must be positive: %w", inst.Group, inst.ID, ttl, ErrInvalidInstance)
	}
	inst = inst.clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrRegistryClosed
	}
	now := r.clock.Now()
	r.expireLocked(now)
	r.leaseSeq++
	e := &entry{inst: inst, lease: r.leaseSeq, ttl: ttl, expires: now.Add(ttl)}
	g := r.groups[inst.Group]
	if g == nil {
		g = map[string]*entry{}
		r.groups[inst.Group] = g
	}
	g[inst.ID] = e
	r.rev++
	r.log.Debug("lane instance registered", zap.String("group", inst.Group), zap.String("lane", inst.Lane),
		zap.String("id", inst.ID), zap.String("addr", inst.Addr), zap.Duration("ttl", ttl))
	r.notifyLocked(inst.Group)
	r.armLocked()
	return &memoryLease{r: r, inst: inst, id: e.lease, ttl: ttl}, nil
}

// Instances implements Registry.
func (r *MemoryRegistry) Instances(ctx context.Context, group, lane string) ([]Instance, error) {
	s, err := r.Snapshot(ctx, group)
	if err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(s.Instances[lane]))
	for _, in := range s.Instances[lane] {
		out = append(out, in.clone())
	}
	return out, nil
}

// Lanes implements Registry.
func (r *MemoryRegistry) Lanes(ctx context.Context, group string) ([]string, error) {
	s, err := r.Snapshot(ctx, group)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(s.Instances))
	for l := range s.Instances {
		out = append(out, l)
	}
	slices.Sort(out)
	return out, nil
}

// Snapshot implements Registry.
func (r *MemoryRegistry) Snapshot(ctx context.Context, group string) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Snapshot{}, ErrRegistryClosed
	}
	r.expireLocked(r.clock.Now())
	return r.snapshotLocked(group), nil
}

// Watch implements Registry.
func (r *MemoryRegistry) Watch(ctx context.Context, group string) (<-chan Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &watcher{ch: make(chan Snapshot, 1)}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrRegistryClosed
	}
	r.expireLocked(r.clock.Now())
	ws := r.watchers[group]
	if ws == nil {
		ws = map[*watcher]struct{}{}
		r.watchers[group] = ws
	}
	ws[w] = struct{}{}
	w.ch <- r.snapshotLocked(group)
	r.mu.Unlock()

	go func() {
		select {
		case <-ctx.Done():
		case <-r.closing:
			return // Close closed the channel
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.watchers[group][w]; ok {
			delete(r.watchers[group], w)
			if len(r.watchers[group]) == 0 {
				delete(r.watchers, group)
			}
			close(w.ch)
		}
	}()
	return w.ch, nil
}

// Close drops every registration, closes every watch channel and stops the
// expiry timer. Later calls fail with ErrRegistryClosed.
func (r *MemoryRegistry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	close(r.closing)
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
	for g, ws := range r.watchers {
		for w := range ws {
			close(w.ch)
		}
		delete(r.watchers, g)
	}
	r.groups = map[string]map[string]*entry{}
	return nil
}

// snapshotLocked builds an immutable copy of a group's state.
func (r *MemoryRegistry) snapshotLocked(group string) Snapshot {
	s := Snapshot{Group: group, Revision: r.rev, Instances: map[string][]Instance{}}
	for _, e := range r.groups[group] {
		s.Instances[e.inst.Lane] = append(s.Instances[e.inst.Lane], e.inst.clone())
	}
	for _, ins := range s.Instances {
		slices.SortFunc(ins, func(a, b Instance) int {
			switch {
			case a.ID < b.ID:
				return -1
			case a.ID > b.ID:
				return 1
			}
			return 0
		})
	}
	return s
}

// notifyLocked hands the group's new snapshot to each watcher, replacing one
// the watcher has not read yet. Only this method sends, always under r.mu,
// so after draining the buffered slot the send cannot block.
func (r *MemoryRegistry) notifyLocked(group string) {
	ws := r.watchers[group]
	if len(ws) == 0 {
		return
	}
	s := r.snapshotLocked(group)
	for w := range ws {
		select {
		case w.ch <- s:
		default:
			select {
			case <-w.ch:
			default:
			}
			w.ch <- s
		}
	}
}

// expireLocked removes every entry whose lease ran out by now.
func (r *MemoryRegistry) expireLocked(now time.Time) {
	for g, es := range r.groups {
		changed := false
		for id, e := range es {
			if !now.Before(e.expires) {
				delete(es, id)
				changed = true
				r.log.Info("lane instance lease expired", zap.String("group", g), zap.String("lane", e.inst.Lane),
					zap.String("id", id), zap.Duration("ttl", e.ttl))
			}
		}
		if len(es) == 0 {
			delete(r.groups, g)
		}
		if changed {
			r.rev++
			r.notifyLocked(g)
		}
	}
}

// armLocked keeps one timer pending for the earliest expiry, so watchers
// learn about a dead instance without anyone calling the registry.
func (r *MemoryRegistry) armLocked() {
	var next time.Time
	for _, es := range r.groups {
		for _, e := range es {
			if next.IsZero() || e.expires.Before(next) {
				next = e.expires
			}
		}
	}
	if next.IsZero() || (r.stop != nil && r.timerAt.Equal(next)) {
		return
	}
	if r.stop != nil {
		r.stop()
	}
	r.timerAt = next
	r.timerGen++
	gen := r.timerGen
	r.stop = r.clock.AfterFunc(next.Sub(r.clock.Now()), func() { r.onTimer(gen) })
}

// onTimer runs when the timer of generation gen fires. A timer replaced
// while it was already firing finds a newer generation and leaves.
func (r *MemoryRegistry) onTimer(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || gen != r.timerGen {
		return
	}
	r.stop = nil
	r.expireLocked(r.clock.Now())
	r.armLocked()
}

// lookupLocked returns the entry a lease owns, or nil when it is gone.
func (r *MemoryRegistry) lookupLocked(inst Instance, lease uint64) *entry {
	e := r.groups[inst.Group][inst.ID]
	if e == nil || e.lease != lease {
		return nil
	}
	return e
}

type memoryLease struct {
	r    *MemoryRegistry
	inst Instance
	id   uint64
	ttl  time.Duration
}

func (l *memoryLease) Instance() Instance { return l.inst.clone() }
func (l *memoryLease) TTL() time.Duration { return l.ttl }

func (l *memoryLease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := l.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrRegistryClosed
	}
	now := r.clock.Now()
	r.expireLocked(now)
	e := r.lookupLocked(l.inst, l.id)
	if e == nil {
		return fmt.Errorf("group %q instance %q: %w", l.inst.Group, l.inst.ID, ErrLeaseExpired)
	}
	e.expires = now.Add(e.ttl)
	r.armLocked()
	return nil
}

func (l *memoryLease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := l.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.expireLocked(r.clock.Now())
	if r.lookupLocked(l.inst, l.id) == nil {
		return nil
	}
	delete(r.groups[l.inst.Group], l.inst.ID)
	if len(r.groups[l.inst.Group]) == 0 {
		delete(r.groups, l.inst.Group)
	}
	r.rev++
	r.notifyLocked(l.inst.Group)
	r.armLocked()
	return nil
}
