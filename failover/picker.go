package failover

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Handle is one resource of a Picker as Pick returns it. Report the outcome
// of using it with the Picker's Success, Failure or Release. A handle stays
// valid across Update: as long as its key is in the set, outcomes reported
// through it reach the resource's health; once the key is removed they are
// ignored.
type Handle[T any] struct {
	n        *node
	value    T
	priority int
}

// Key returns the resource's key.
func (h *Handle[T]) Key() string { return h.n.key }

// Value returns the resource's value as given in the resource set this handle
// came from.
func (h *Handle[T]) Value() T { return h.value }

// Priority returns the resource's priority (lower is preferred).
func (h *Handle[T]) Priority() int { return h.priority }

// Weight returns the resource's current weight.
func (h *Handle[T]) Weight() float64 { return h.n.load() }

// MaxWeight returns the weight of the resource when fully healthy.
func (h *Handle[T]) MaxWeight() float64 { return h.n.lim.Load().max }

// MinWeight returns the resource's floor weight.
func (h *Handle[T]) MinWeight() float64 { return h.n.lim.Load().min }

// IsDown reports whether the resource is at its min weight.
func (h *Handle[T]) IsDown() bool { return isDown(h.n.load(), h.n.lim.Load()) }

// Inflight returns the number of picks of the resource not yet reported
// (always 0 unless Config.InflightAware).
func (h *Handle[T]) Inflight() int64 { return h.n.inflight.Load() }

// member is the pick path's flat view of one resource: the node and the
// bounds of the resource set it belongs to, side by side in one slice so a
// pick walks contiguous memory.
type member struct {
	n        *node
	max, min float64
}

// span is one priority group: members[start:end] of a snapshot, whose max
// weights add up to max.
type span struct {
	start, end int
	max        float64
}

// snapshot is an immutable resource set. Picks read the current one through
// an atomic pointer; Update builds a new one and swaps it in.
type snapshot[T any] struct {
	members []member     // sorted by priority, input order within a priority
	handles []*Handle[T] // handles[i] is members[i]
	groups  []span       // in priority order
	byKey   map[string]int
}

// Picker picks one resource among many by weighted health. Its methods are
// safe for concurrent use. Pick takes no lock and allocates nothing.
type Picker[T any] struct {
	snap atomic.Pointer[snapshot[T]]
	// tuning is the Config in force, with defaults filled in; Reconfigure
	// swaps it. The fields Reconfigure may not change are copied out below.
	tuning        atomic.Pointer[Config[T]]
	name          string
	inflightAware bool
	log           *zap.Logger
	met           *metrics
	retuned       chan struct{} // wakes the maintainer after Reconfigure

	updateMu sync.Mutex // serializes Update and Close

	// The maintainer goroutine probes down resources (or ends their
	// quarantine). It runs only while some resource is down.
	ctx     context.Context
	cancel  context.CancelFunc
	maintMu sync.Mutex
	running bool
	closed  bool
	maintWG sync.WaitGroup
}

// New returns a Picker over resources, tuned by cfg. An empty set is allowed
// (Pick returns ErrNoResource until an Update brings resources). Invalid
// input returns an error wrapping ErrInvalidConfig or ErrInvalidResource.
// Call Close to stop background probing.
func New[T any](resources []Resource[T], cfg Config[T]) (*Picker[T], error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Picker[T]{
		name:          c.Name,
		inflightAware: c.InflightAware,
		log:           c.Logger.With(zap.String("picker", c.Name)),
		retuned:       make(chan struct{}, 1),
	}
	p.tuning.Store(&c)
	if c.Registerer != nil {
		if p.met, err = newMetrics(c.Registerer); err != nil {
			return nil, err
		}
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if err := p.Update(resources); err != nil {
		p.cancel()
		return nil, err
	}
	return p, nil
}

// Update replaces the resource set, for a configuration reload. Resources
// whose key stays keep their health: a weight is carried as its share of the
// max weight, so a healthy resource whose max weight changed is healthy at
// the new max, and a down one stays down. New keys start at their init
// weight; removed keys are no longer picked and their handles' reports are
// ignored. Picks running during the swap see either the old or the new set
// (see the package doc for weights rescaled during the swap).
// On invalid input nothing changes.
func (p *Picker[T]) Update(resources []Resource[T]) error {
	type prepared struct {
		r    *Resource[T]
		lim  limits
		init float64
	}
	prep := make([]prepared, len(resources))
	seen := make(map[string]struct{}, len(resources))
	places := make(map[[2]string]string, len(resources))
	for i := range resources {
		r := &resources[i]
		lim, init, err := r.normalize()
		if err != nil {
			return err
		}
		if _, dup := seen[r.Key]; dup {
			return fmt.Errorf("resource %q: duplicate key: %w", r.Key, ErrInvalidResource)
		}
		seen[r.Key] = struct{}{}
		place := r.place()
		if other, dup := places[place]; dup {
			return fmt.Errorf("resource %q: cluster %q and endpoint %q already name resource %q: %w",
				r.Key, place[0], place[1], other, ErrInvalidResource)
		}
		places[place] = r.Key
		prep[i] = prepared{r: r, lim: lim, init: init}
	}
	slices.SortStableFunc(prep, func(a, b prepared) int {
		return compareInt(a.r.Priority, b.r.Priority)
	})

	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	old := p.snap.Load()
	s := &snapshot[T]{
		members: make([]member, len(prep)),
		handles: make([]*Handle[T], len(prep)),
		byKey:   make(map[string]int, len(prep)),
	}
	anyDown := false
	for i, pr := range prep {
		var n *node
		if old != nil {
			if j, ok := old.byKey[pr.r.Key]; ok {
				n = old.members[j].n
			}
		}
		lim := pr.lim
		if n != nil {
			p.rescale(n, &lim)
			if place := pr.r.place(); place != n.place {
				p.met.detach(p.name, n)
				n.place = place
				p.met.attach(p.name, n)
			}
		} else {
			n = &node{key: pr.r.Key, place: pr.r.place()}
			n.lim.Store(&lim)
			n.weight.Store(math.Float64bits(pr.init))
			if isDown(pr.init, &lim) {
				n.downAt.Store(time.Now().UnixNano())
			}
			p.met.attach(p.name, n)
		}
		anyDown = anyDown || isDown(n.load(), &lim)
		s.members[i] = member{n: n, max: lim.max, min: lim.min}
		s.handles[i] = &Handle[T]{n: n, value: pr.r.Value, priority: pr.r.Priority}
		s.byKey[pr.r.Key] = i
		if i == 0 || pr.r.Priority != prep[i-1].r.Priority {
			s.groups = append(s.groups, span{start: i})
		}
		g := &s.groups[len(s.groups)-1]
		g.end = i + 1
		g.max += lim.max
	}
	p.snap.Store(s)
	if old != nil {
		for _, m := range old.members {
			if _, stays := s.byKey[m.n.key]; !stays {
				m.n.removed.Store(true)
				p.met.detach(p.name, m.n)
			}
		}
	}
	if anyDown {
		p.ensureMaintainer()
	}
	return nil
}

// conf returns the tuning in force.
func (p *Picker[T]) conf() *Config[T] { return p.tuning.Load() }

// Reconfigure changes the tuning of a live picker, for a configuration
// reload: the factors and steps, the spill policy, the slow threshold, the
// checker, its interval and timeout, the quarantine and the weight listener
// apply to every pick and report after it returns. Resources, their health
// and their handles stay as they are, so outcomes of picks made before keep
// counting. Name, Registerer and Logger name the picker for its whole life
// and are not read again; InflightAware cannot change while picks may be in
// flight (their counts would go wrong), so a different value is refused.
// On invalid input nothing changes and the error wraps ErrInvalidConfig.
func (p *Picker[T]) Reconfigure(cfg Config[T]) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if c.InflightAware != p.inflightAware {
		return fmt.Errorf("InflightAware cannot change on a live picker: %w", ErrInvalidConfig)
	}
	p.tuning.Store(&c)
	select {
	case p.retuned <- struct{}{}:
	default:
	}
	// A checker or a quarantine may have been turned on while resources
	// are down.
	for _, m := range p.snap.Load().members {
		if isDown(m.n.load(), m.n.lim.Load()) {
			p.ensureMaintainer()
			break
		}
	}
	return nil
}

func compareInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Handles returns the current resources in pick order (by priority). It
// allocates; it is meant for inspection, not for the hot path.
func (p *Picker[T]) Handles() []*Handle[T] {
	return slices.Clone(p.snap.Load().handles)
}

// Lookup returns the current handle of key.
func (p *Picker[T]) Lookup(key string) (*Handle[T], bool) {
	s := p.snap.Load()
	i, ok := s.byKey[key]
	if !ok {
		return nil, false
	}
	return s.handles[i], true
}

// Close stops background probing and removes this picker's metric series.
// Picks and reports keep working afterwards, but down resources are no
// longer probed or released from quarantine.
func (p *Picker[T]) Close() {
	p.maintMu.Lock()
	already := p.closed
	p.closed = true
	p.maintMu.Unlock()
	if already {
		return
	}
	p.cancel()
	p.maintWG.Wait()
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	for _, m := range p.snap.Load().members {
		p.met.detach(p.name, m.n)
	}
}
