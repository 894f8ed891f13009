package failover

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// bringsBack reports whether the tuning brings down resources back at all:
// by probing them, or by ending their quarantine (negative: never).
func (c *Config[T]) bringsBack() bool { return c.Checker != nil || c.Quarantine >= 0 }

// ensureMaintainer starts the background round that brings down resources
// back, unless it runs already, the picker is closed, or there is nothing it
// could do (no Checker and no quarantine).
//
// It is called after a resource goes down. The round stops by itself once
// nothing is down; it decides so under maintMu, and a resource going down
// after that decision calls here under the same mutex, so a down resource is
// never left without a round.
func (p *Picker[T]) ensureMaintainer() {
	if !p.conf().bringsBack() {
		return
	}
	p.maintMu.Lock()
	defer p.maintMu.Unlock()
	if p.closed || p.running {
		return
	}
	p.running = true
	p.maintWG.Add(1)
	go p.maintain()
}

func (p *Picker[T]) maintain() {
	defer p.maintWG.Done()
	every := p.conf().CheckInterval
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			p.stopMaintainer()
			return
		case <-p.retuned:
			// Reconfigure changed the tuning: follow a new interval at
			// once rather than after a tick of the old one.
			if iv := p.conf().CheckInterval; iv != every {
				every = iv
				t.Reset(every)
			}
			continue
		case <-t.C:
		}
		p.round()
		if p.stopIfIdle() {
			return
		}
	}
}

func (p *Picker[T]) stopMaintainer() {
	p.maintMu.Lock()
	p.running = false
	p.maintMu.Unlock()
}

// stopIfIdle ends the round when nothing is down, or when the tuning
// leaves it nothing to do (Reconfigure turned the Checker off and the
// quarantine to never; a later Reconfigure starts a round again).
func (p *Picker[T]) stopIfIdle() bool {
	p.maintMu.Lock()
	defer p.maintMu.Unlock()
	if !p.conf().bringsBack() {
		p.running = false
		return true
	}
	for _, m := range p.snap.Load().members {
		if isDown(m.n.load(), m.n.lim.Load()) {
			return false
		}
	}
	p.running = false
	return true
}

// round probes every down resource once (concurrently, each within
// CheckTimeout) or, without a Checker, releases those whose quarantine is
// over.
func (p *Picker[T]) round() {
	s := p.snap.Load()
	c := p.conf()
	now := time.Now().UnixNano()
	var wg sync.WaitGroup
	for i, m := range s.members {
		n := m.n
		if !isDown(n.load(), n.lim.Load()) {
			continue
		}
		if c.Checker == nil {
			if c.Quarantine < 0 {
				continue // never released
			}
			since := n.downAt.Load()
			if since == 0 {
				// Down with no start time: a success that raced the fall
				// cleared downAt after the fall set it (their weight CASes
				// and the bookkeeping after them can interleave). Start the
				// quarantine now rather than never release the resource.
				n.downAt.CompareAndSwap(0, now)
				continue
			}
			if now-since >= int64(c.Quarantine) {
				p.releaseQuarantine(n)
			}
			continue
		}
		h := s.handles[i]
		wg.Go(func() { p.probe(c, h) })
	}
	wg.Wait()
}

func (p *Picker[T]) probe(c *Config[T], h *Handle[T]) {
	ctx, cancel := context.WithTimeout(p.ctx, c.CheckTimeout)
	defer cancel()
	err := c.Checker(ctx, h)
	if p.ctx.Err() != nil {
		// Closing: the probe was cut short, it says nothing of the resource.
		return
	}
	if err != nil {
		h.n.streak.Store(0)
		p.log.Debug("failover probe failed", zap.String("resource", h.n.key), zap.Error(err))
		return
	}
	p.succeed(h.n)
}

// releaseQuarantine puts a down resource back at min + RecoverStep x max, on
// probation: nothing proves it healthy, so its first failure takes it
// straight down again, while its first success confirms it.
func (p *Picker[T]) releaseQuarantine(n *node) {
	if n.removed.Load() {
		return
	}
	lim := n.lim.Load()
	w := n.load()
	if !isDown(w, lim) {
		return
	}
	nw := min(lim.min+p.conf().RecoverStep*lim.max, lim.max)
	n.probation.Store(true)
	if !n.cas(w, nw) {
		n.probation.Store(false)
		return
	}
	p.log.Info("failover resource quarantine over", zap.String("resource", n.key))
	p.changed(n, true, false, w, nw, nil)
}
