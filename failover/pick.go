package failover

import (
	"fmt"
	"math/rand/v2"
)

// Pick returns a resource chosen by weighted health, never one of exclude
// (the targets a retry already tried; nil entries are ignored).
//
// The first priority group takes all traffic while its health x
// OverprovisionFactor is at least 1; below that it takes that share and the
// rest spills to the next group, and so on. Within the chosen group the pick
// is weighted random over the current (effective) weights. Excluded
// resources count as absent, both for the pick and for their group's health.
//
// When no group has any weight left (everything not excluded is at zero)
// and no excluded resource is up either, Pick still returns one of the
// remaining resources, of the most preferred group, at random: a stale
// "dead" verdict must cost the caller one attempt, not an error. But while
// an excluded resource is up, Pick returns ErrNoResource rather than a down
// one: the caller's retry loop should come back to the up resources (after
// a pause of its own) and leave the down ones to their probes, or every
// failure on an up resource would send a retry to each down one. Pick also
// returns ErrNoResource when nothing is left at all: the set is empty or
// every resource is excluded.
//
// Pick takes no lock and does not allocate. With InflightAware, the caller
// must report the outcome of every pick (Success, Failure or Release).
func (p *Picker[T]) Pick(exclude ...*Handle[T]) (*Handle[T], error) {
	return p.pick(exclude)
}

// PickExcluding is Pick with the excluded handles as a slice, as a retry loop
// keeps them.
func (p *Picker[T]) PickExcluding(tried []*Handle[T]) (*Handle[T], error) {
	return p.pick(tried)
}

// groupSum is one pass over the pickable members of a group.
type groupSum struct {
	cur  float64 // sum of current weights
	max  float64 // sum of max weights
	eff  float64 // sum of effective weights (inflight-adjusted)
	live int     // members not excluded
	up   int     // members above their min weight
	// equal: every effective weight is the same (a healthy group of equal
	// resources, or one with no weight left), so the pick is uniform.
	equal bool
}

// fastGroup is the largest first group the fast path handles; its weights
// are then kept on the stack between the two passes.
const fastGroup = 16

func (p *Picker[T]) pick(ex []*Handle[T]) (*Handle[T], error) {
	s := p.snap.Load()
	if len(ex) == 0 && len(s.groups) > 0 && s.groups[0].end-s.groups[0].start <= fastGroup {
		if h := p.pickFast(s); h != nil {
			return h, nil
		}
	}
	return p.pickSlow(s, ex)
}

// pickFast serves the steady state: no exclusions, and a first group healthy
// enough to take all traffic. It reads each weight once, keeps the effective
// weights on the stack for the weighted draw and draws one random number.
// It returns nil when the first group cannot take all traffic.
func (p *Picker[T]) pickFast(s *snapshot[T]) *Handle[T] {
	g := s.groups[0]
	ms := s.members[g.start:g.end]
	inflightAware := p.inflightAware
	c := p.conf()
	var eff [fastGroup]float64
	cur, total, up, equal := 0.0, 0.0, false, true
	for i := range ms {
		n := ms[i].n
		w := n.load()
		cur += w
		up = up || w > ms[i].min
		e := w
		if inflightAware {
			if in := n.inflight.Load(); in > 0 {
				e = w / float64(1+in)
			}
		}
		eff[i] = e
		total += e
		equal = equal && e == eff[0]
	}
	if c.SpillOnlyWhenDead {
		if !up {
			return nil
		}
	} else if cur*c.OverprovisionFactor < g.max {
		return nil
	}
	if !(total > 0) {
		return nil
	}
	var k int
	if equal {
		// Equal weights (a healthy group of equal resources): index
		// directly, without a walk whose exit the CPU cannot predict.
		k = int((rand.Uint64() >> 32) * uint64(len(ms)) >> 32)
	} else {
		r := rand.Float64() * total
		k = -1
		for i := range ms {
			if eff[i] <= 0 {
				continue
			}
			k = i
			if r < eff[i] {
				break
			}
			r -= eff[i]
		}
	}
	if inflightAware {
		ms[k].n.inflight.Add(1)
	}
	return s.handles[g.start+k]
}

// pickSlow handles exclusions, spilling between groups and every corner case.
func (p *Picker[T]) pickSlow(s *snapshot[T], ex []*Handle[T]) (*Handle[T], error) {
	u := -1.0 // the uniform draw, taken only when the first group cannot take all
	cum, remaining := 0.0, 1.0
	first := -1 // the first group with a pickable member
	for gi, g := range s.groups {
		gs := p.sumGroup(s, g, ex)
		if gs.live == 0 {
			continue
		}
		if first < 0 {
			first = gi
		}
		share := min(p.health(&gs), remaining)
		if share <= 0 {
			continue
		}
		if u < 0 {
			if share >= 1 {
				return p.pickIn(s, g, ex, &gs)
			}
			u = rand.Float64()
		}
		if u < cum+share {
			return p.pickIn(s, g, ex, &gs)
		}
		cum += share
		remaining -= share
	}
	if first < 0 {
		if len(s.members) == 0 {
			return nil, fmt.Errorf("%w: the resource set is empty; pass resources to New or Update", ErrNoResource)
		}
		return nil, fmt.Errorf("%w: all %d resources were excluded as already tried", ErrNoResource, len(s.members))
	}
	if cum > 0 {
		// Every group is degraded and their shares add up to cum < 1: split
		// the traffic in proportion to the shares, so that a degraded
		// preferred group keeps its lead over a degraded fallback one.
		v := (u - cum) / (1 - cum) * cum
		acc, last := 0.0, -1
		for gi, g := range s.groups {
			gs := p.sumGroup(s, g, ex)
			h := p.health(&gs)
			if gs.live == 0 || h <= 0 {
				continue
			}
			last = gi
			if v < acc+h {
				return p.pickIn(s, g, ex, &gs)
			}
			acc += h
		}
		if last >= 0 {
			g := s.groups[last]
			gs := p.sumGroup(s, g, ex)
			return p.pickIn(s, g, ex, &gs)
		}
	}
	// Nothing left has weight. While a resource already tried is up, the
	// caller has somewhere better to go than a down one: it should come
	// back to the up ones (after whatever pause its retry loop makes), and
	// a down resource keeps to its probes.
	if len(ex) > 0 {
		if up := upExcluded(s, ex); up > 0 {
			return nil, fmt.Errorf("%w: the %d resources not yet tried are down, while %d already tried are up",
				ErrNoResource, len(s.members)-len(ex), up)
		}
	}
	// Nothing at all is up: the last resort is the most preferred group,
	// so that a stale verdict costs one attempt, not an error.
	g := s.groups[first]
	gs := p.sumGroup(s, g, ex)
	return p.pickIn(s, g, ex, &gs)
}

// sumGroup sums the weights of the members of g not in ex.
func (p *Picker[T]) sumGroup(s *snapshot[T], g span, ex []*Handle[T]) (gs groupSum) {
	gs.equal = true
	first := 0.0
	for i := g.start; i < g.end; i++ {
		m := &s.members[i]
		if len(ex) > 0 && excluded(m.n, ex) {
			continue
		}
		w := m.n.load()
		gs.live++
		gs.cur += w
		gs.max += m.max
		if w > m.min {
			gs.up++
		}
		e := p.effective(m.n, w)
		if gs.live == 1 {
			first = e
		}
		gs.equal = gs.equal && e == first
		gs.eff += e
	}
	return gs
}

// health turns a group's sums into the share of traffic it can take, in
// [0, 1].
func (p *Picker[T]) health(gs *groupSum) float64 {
	if gs.live == 0 {
		return 0
	}
	c := p.conf()
	if c.SpillOnlyWhenDead {
		if gs.up > 0 {
			return 1
		}
		return 0
	}
	if c.OverprovisionFactor*gs.cur >= gs.max {
		return 1
	}
	return c.OverprovisionFactor * gs.cur / gs.max
}

// effective is the weight used within a group: the health weight, divided by
// 1 + inflight in InflightAware mode.
func (p *Picker[T]) effective(n *node, w float64) float64 {
	if p.inflightAware {
		if in := n.inflight.Load(); in > 0 {
			return w / float64(1+in)
		}
	}
	return w
}

// pickIn picks within group g, weighted by effective weight; gs is the
// group's sums as the caller saw them.
func (p *Picker[T]) pickIn(s *snapshot[T], g span, ex []*Handle[T], gs *groupSum) (*Handle[T], error) {
	if gs.live == 0 {
		return nil, ErrNoResource
	}
	chosen := -1
	if !gs.equal && gs.eff > 0 {
		r := rand.Float64() * gs.eff
		for i := g.start; i < g.end; i++ {
			m := &s.members[i]
			if len(ex) > 0 && excluded(m.n, ex) {
				continue
			}
			e := p.effective(m.n, m.n.load())
			if e <= 0 {
				continue
			}
			// Remember the last candidate: weights may have moved since
			// they were summed, and r may then outrun the walk.
			chosen = i
			if r < e {
				break
			}
			r -= e
		}
	}
	if chosen < 0 {
		// Equal weights, or no weight left: uniform over the members not
		// excluded. Their number cannot have changed since the sum, as the
		// snapshot and the exclusions are fixed.
		k := int((rand.Uint64() >> 32) * uint64(gs.live) >> 32)
		if len(ex) == 0 {
			chosen = g.start + k
		} else {
			for i := g.start; i < g.end; i++ {
				if excluded(s.members[i].n, ex) {
					continue
				}
				if k == 0 {
					chosen = i
					break
				}
				k--
			}
		}
	}
	if p.inflightAware {
		s.members[chosen].n.inflight.Add(1)
	}
	return s.handles[chosen], nil
}

// upExcluded counts the members of s in ex that are above their min weight.
func upExcluded[T any](s *snapshot[T], ex []*Handle[T]) int {
	up := 0
	for i := range s.members {
		m := &s.members[i]
		if m.n.load() > m.min && excluded(m.n, ex) {
			up++
		}
	}
	return up
}

func excluded[T any](n *node, ex []*Handle[T]) bool {
	for _, h := range ex {
		if h != nil && h.n == n {
			return true
		}
	}
	return false
}
