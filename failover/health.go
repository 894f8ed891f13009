package failover

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// limits are the weight bounds of a resource. A node points at its current
// limits so that an outcome reported through a handle of an older resource
// set is judged against the bounds in force now.
type limits struct {
	max, min float64
}

// node is the health of one resource. It lives as long as its key stays in
// the resource set, across any number of Updates. Every field is atomic: the
// pick path reads them without a lock and reporters change them with CAS.
type node struct {
	weight   atomic.Uint64 // float64 bits of the current weight
	inflight atomic.Int64  // picks not yet reported (InflightAware only)
	downAt   atomic.Int64  // unix nanoseconds when it went down; 0 when up
	streak   atomic.Int32  // successes in a row while down
	// probation is set when a quarantine ends without evidence of health;
	// the first failure then takes the resource straight down again.
	probation atomic.Bool
	// removed is set once the key left the resource set: outcomes reported
	// through stale handles are then ignored.
	removed atomic.Bool
	lim     atomic.Pointer[limits]

	key   string
	place [2]string          // cluster and endpoint labels
	gauge prometheus.Gauge   // nil without metrics
	downs prometheus.Counter // nil without metrics
}

func (n *node) load() float64 { return math.Float64frombits(n.weight.Load()) }

// isDown reports whether weight w is at the floor of lim.
func isDown(w float64, lim *limits) bool { return w <= lim.min }

// cas swaps the weight from old to nw; it returns false when another
// reporter got there first.
func (n *node) cas(old, nw float64) bool {
	return n.weight.CompareAndSwap(math.Float64bits(old), math.Float64bits(nw))
}

// Success reports that a call to h's resource succeeded after latency. The
// weight of a healthy resource climbs by SuccessStep x max; a down resource
// climbs by RecoverStep x max once RecoverThreshold successes came in a row.
// A success slower than Config.SlowThreshold counts as a failure.
func (p *Picker[T]) Success(h *Handle[T], latency time.Duration) {
	p.release(h.n)
	if slow := p.conf().SlowThreshold; slow > 0 && latency >= slow {
		p.fail(h.n, ErrSlow)
		return
	}
	p.succeed(h.n)
}

// Failure reports that a call to h's resource failed with err. The weight is
// multiplied by FailureFactor, and drops to the min weight when that leaves
// it under DownRatio x max. A context.Canceled error is the caller giving up,
// not the resource failing: it only ends the pick, like Release.
func (p *Picker[T]) Failure(h *Handle[T], err error) {
	p.release(h.n)
	if errors.Is(err, context.Canceled) {
		return
	}
	p.fail(h.n, err)
}

// Down takes h's resource to its min weight at once, for a failure that
// leaves no doubt (a refused connection, a cluster reported offline). It
// does not end a pick: report that with Failure or Release.
func (p *Picker[T]) Down(h *Handle[T], cause error) {
	n := h.n
	if n.removed.Load() {
		return
	}
	lim := n.lim.Load()
	for {
		w := n.load()
		if isDown(w, lim) {
			return
		}
		if n.cas(w, lim.min) {
			p.changed(n, false, true, w, lim.min, cause)
			return
		}
	}
}

// Release ends a pick without judging the resource, for a call abandoned
// for reasons of the caller's own. It matters only with InflightAware.
func (p *Picker[T]) Release(h *Handle[T]) { p.release(h.n) }

func (p *Picker[T]) release(n *node) {
	if !p.inflightAware {
		return
	}
	// Never below zero, even if a caller reports more often than it picked.
	for {
		v := n.inflight.Load()
		if v <= 0 || n.inflight.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// succeed applies one success to n.
func (p *Picker[T]) succeed(n *node) {
	if n.removed.Load() {
		return
	}
	lim := n.lim.Load()
	w := n.load()
	if w >= lim.max {
		// The common case on the hot path: healthy stays healthy, with no
		// write at all.
		if n.probation.Load() {
			n.probation.Store(false)
		}
		return
	}
	c := p.conf()
	if isDown(w, lim) && c.RecoverThreshold > 1 {
		if n.streak.Add(1) < int32(c.RecoverThreshold) {
			return
		}
	}
	for {
		var nw float64
		if isDown(w, lim) {
			nw = lim.min + c.RecoverStep*lim.max
		} else {
			nw = w + c.SuccessStep*lim.max
		}
		nw = min(nw, lim.max)
		if n.cas(w, nw) {
			if n.streak.Load() != 0 {
				n.streak.Store(0)
			}
			if n.probation.Load() {
				n.probation.Store(false)
			}
			p.changed(n, isDown(w, lim), false, w, nw, nil)
			return
		}
		w = n.load()
		if w >= lim.max {
			return
		}
	}
}

// fail applies one failure to n.
func (p *Picker[T]) fail(n *node, cause error) {
	if n.removed.Load() {
		return
	}
	if n.streak.Load() != 0 {
		n.streak.Store(0)
	}
	lim := n.lim.Load()
	c := p.conf()
	for {
		w := n.load()
		if isDown(w, lim) {
			return
		}
		nw := w * c.FailureFactor
		if nw < c.DownRatio*lim.max || nw < lim.min || n.probation.Load() {
			nw = lim.min
		}
		if n.cas(w, nw) {
			p.changed(n, false, isDown(nw, lim), w, nw, cause)
			return
		}
	}
}

// changed runs after a weight change from old to nw won its CAS: it keeps the
// down state, metrics, listener and log in step with the weight. wasDown and
// nowDown say whether old and nw are at the floor (each under the limits in
// force when it was set).
func (p *Picker[T]) changed(n *node, wasDown, nowDown bool, old, nw float64, cause error) {
	if n.gauge != nil {
		// The current weight, not nw: concurrent reporters run this after
		// their CASes in any order, and the gauge must not be left on an
		// older value (during a burst of failures it would show a dead
		// resource as half alive until its next change).
		n.gauge.Set(n.load())
	}
	if l := p.conf().WeightListener; l != nil {
		l(n.key, old, nw)
	}
	switch {
	case nowDown && !wasDown:
		n.downAt.Store(time.Now().UnixNano())
		n.probation.Store(false)
		if n.downs != nil {
			n.downs.Inc()
		}
		p.log.Warn("failover resource down",
			zap.String("resource", n.key), zap.Float64("weight", nw), zap.Error(cause))
		p.ensureMaintainer()
	case wasDown && !nowDown:
		n.downAt.Store(0)
		p.log.Info("failover resource back up",
			zap.String("resource", n.key), zap.Float64("weight", nw))
	}
}

// rescale moves n to new limits when an Update changed its weights, keeping
// its health as a share of the max weight; a down resource stays down.
func (p *Picker[T]) rescale(n *node, nl *limits) {
	ol := n.lim.Load()
	if *ol == *nl {
		return
	}
	n.lim.Store(nl)
	for {
		w := n.load()
		var nw float64
		if isDown(w, ol) {
			nw = nl.min
		} else {
			nw = min(max(w/ol.max*nl.max, nl.min), nl.max)
		}
		if w == nw {
			return
		}
		if n.cas(w, nw) {
			p.changed(n, isDown(w, ol), isDown(nw, nl), w, nw, nil)
			return
		}
	}
}
