package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/failover"
	"github.com/twinmq/twinmq/lane"
)

// laneRouter is the lane side of a consumer: its registration in the
// registry, the group's live lanes, one failover picker per lane over that
// lane's instances, the forwarding client and the forwarding service.
type laneRouter struct {
	c   *Consumer
	reg lane.Registry

	state atomic.Pointer[routeState]

	leaseMu sync.Mutex
	lease   lane.Lease
	// leaseTTL is the TTL the lease was asked for: a registry may grant
	// another (an etcd one rounds to whole seconds), so the lease's own
	// TTL says nothing about whether the configuration changed.
	leaseTTL time.Duration
	leaving  bool
	retuned  chan struct{} // wakes keepLease after a reload moved the lease

	ctx    context.Context // ends the lease and watch loops
	cancel context.CancelFunc
	wg     sync.WaitGroup

	fwd    *forwarder
	server *forwardServer
}

// routeState is one snapshot of the group with the pickers built for it.
// It is replaced whole by the watch loop.
type routeState struct {
	snap    lane.Snapshot
	pickers map[string]*failover.Picker[lane.Instance]
}

func newLaneRouter(ctx context.Context, c *Consumer, ls *liveSettings) (*laneRouter, error) {
	r := &laneRouter{c: c, reg: c.opts.registry, retuned: make(chan struct{}, 1)}
	r.state.Store(&routeState{snap: lane.Snapshot{Group: c.group}, pickers: map[string]*failover.Picker[lane.Instance]{}})
	r.ctx, r.cancel = context.WithCancel(context.Background())
	var err error
	if r.server, err = newForwardServer(c); err != nil {
		r.cancel()
		return nil, err
	}
	r.fwd = newForwarder(c)
	fail := func(err error) (*laneRouter, error) {
		r.shutdown(ctx)
		return nil, err
	}
	ch, err := r.reg.Watch(r.ctx, c.group)
	if err != nil {
		return fail(fmt.Errorf("consumer: watch the lane registry: %w", err))
	}
	// Take the first snapshot before registering, so routing starts from
	// the group's real state rather than from nothing.
	select {
	case snap, ok := <-ch:
		if ok {
			r.apply(snap)
		}
	case <-ctx.Done():
		return fail(fmt.Errorf("consumer: first lane snapshot: %w", ctx.Err()))
	}
	r.wg.Add(1)
	go r.watch(ch)
	lease, err := r.reg.Register(ctx, r.instance(ls), ls.leaseTTL)
	if err != nil {
		return fail(fmt.Errorf("consumer: register in the lane registry: %w", err))
	}
	r.lease, r.leaseTTL = lease, ls.leaseTTL
	r.wg.Add(1)
	go r.keepLease()
	return r, nil
}

func (r *laneRouter) instance(ls *liveSettings) lane.Instance {
	return lane.Instance{Group: r.c.group, Lane: ls.lane, ID: r.c.id, Addr: r.server.addr}
}

// watch applies every snapshot of the group.
func (r *laneRouter) watch(ch <-chan lane.Snapshot) {
	defer r.wg.Done()
	for snap := range ch {
		r.apply(snap)
	}
	if r.ctx.Err() == nil {
		r.c.log.Error("the lane registry stopped sending snapshots; routing keeps the last one")
	}
}

// apply builds the pickers of a new snapshot, carrying the health of the
// instances that stay (a picker per lane is kept and updated), and closes
// what went away.
func (r *laneRouter) apply(snap lane.Snapshot) {
	old := r.state.Load()
	next := &routeState{snap: snap, pickers: make(map[string]*failover.Picker[lane.Instance], len(snap.Instances))}
	for ln, insts := range snap.Instances {
		res := make([]failover.Resource[lane.Instance], 0, len(insts))
		for _, in := range insts {
			if in.ID == r.c.id {
				continue // never forward to ourselves
			}
			res = append(res, failover.Resource[lane.Instance]{Key: in.ID + "@" + in.Addr, Value: in})
		}
		p := old.pickers[ln]
		if p == nil {
			var err error
			p, err = failover.New(res, failover.Config[lane.Instance]{
				Name:   "forward/" + r.c.group + "/" + ln,
				Logger: r.c.log,
			})
			if err != nil {
				r.c.log.Error("cannot build the forwarding picker of a lane", zap.String("lane", ln), zap.Error(err))
				continue
			}
		} else if err := p.Update(res); err != nil {
			r.c.log.Error("cannot update the forwarding picker of a lane", zap.String("lane", ln), zap.Error(err))
		}
		next.pickers[ln] = p
	}
	r.state.Store(next)
	for ln, p := range old.pickers {
		if next.pickers[ln] != p {
			p.Close()
		}
	}
	addrs := map[string]bool{}
	for _, insts := range snap.Instances {
		for _, in := range insts {
			addrs[in.Addr] = true
		}
	}
	r.fwd.retain(addrs)
	r.c.log.Debug("lane snapshot", zap.Int64("revision", snap.Revision), zap.Strings("lanes", slices.Sorted(maps.Keys(snap.Instances))))
}

// keepLease renews the registration at a third of its TTL and registers
// again if the lease was lost (the registry restarted, or a pause outlived
// the TTL) or no longer matches the live settings (a reload's move to a
// new lane or TTL that failed). A reload wakes it, so that a shorter TTL
// is renewed in time.
func (r *laneRouter) keepLease() {
	defer r.wg.Done()
	for {
		r.leaseMu.Lock()
		lease := r.lease
		r.leaseMu.Unlock()
		t := time.NewTimer(lease.TTL() / 3)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-r.retuned:
			t.Stop()
			continue
		case <-t.C:
		}
		r.leaseMu.Lock()
		if r.leaving {
			r.leaseMu.Unlock()
			return
		}
		ls := r.c.live.Load()
		lease = r.lease
		ctx, cancel := context.WithTimeout(r.ctx, lease.TTL()/3)
		var err error
		if lease.Instance().Lane != ls.lane || r.leaseTTL != ls.leaseTTL {
			r.c.log.Info("lane registration differs from the configuration; registering again", zap.String("lane", ls.lane))
			err = r.registerLocked(ctx, ls)
		} else if err = lease.Renew(ctx); errors.Is(err, lane.ErrLeaseExpired) {
			r.c.log.Warn("lane lease lost; registering again", zap.Error(err))
			err = r.registerLocked(ctx, ls)
		}
		cancel()
		r.leaseMu.Unlock()
		if err != nil && r.ctx.Err() == nil {
			r.c.log.Warn("lane lease renewal failed", zap.Error(err))
		}
	}
}

// registerLocked registers the instance ls describes and keeps its lease.
// Registering the same instance id replaces the old entry in one step, so
// the instance is never absent from the registry. r.leaseMu is held.
func (r *laneRouter) registerLocked(ctx context.Context, ls *liveSettings) error {
	lease, err := r.reg.Register(ctx, r.instance(ls), ls.leaseTTL)
	if err != nil {
		return err
	}
	r.lease, r.leaseTTL = lease, ls.leaseTTL
	return nil
}

// reregister moves the registration to a new lane or TTL, and wakes the
// lease loop so that it renews at the pace of the new TTL. A move that
// fails is retried by the lease loop at its next renewal.
func (r *laneRouter) reregister(ls *liveSettings) {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	if r.leaving {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, ls.requestTimeout)
	defer cancel()
	defer func() {
		select {
		case r.retuned <- struct{}{}:
		default:
		}
	}()
	if err := r.registerLocked(ctx, ls); err != nil {
		r.c.log.Error("could not move the lane registration; the lease loop retries", zap.String("lane", ls.lane), zap.Error(err))
		return
	}
	r.c.log.Info("lane registration moved", zap.String("lane", ls.lane))
}

// leave is Close's first step: leave the registry, so the group stops
// routing here, and refuse new forwarded deliveries, so a caller with a
// stale view tries another instance at once.
func (r *laneRouter) leave(ctx context.Context) {
	r.server.draining.Store(true)
	r.leaseMu.Lock()
	r.leaving = true
	lease := r.lease
	r.leaseMu.Unlock()
	if lease != nil {
		if err := lease.Release(ctx); err != nil {
			r.c.log.Warn("could not release the lane lease; it expires by its TTL", zap.Error(err))
		}
	}
}

// shutdown stops the loops, the server and the client connections.
func (r *laneRouter) shutdown(ctx context.Context) {
	r.leaseMu.Lock()
	r.leaving = true
	r.leaseMu.Unlock()
	r.cancel()
	r.wg.Wait()
	r.server.stop(ctx)
	r.fwd.close()
	for _, p := range r.state.Load().pickers {
		p.Close()
	}
}

// route decides where a message goes and takes it there. It follows the
// lane package's rules: the longest live prefix of the message's lane,
// else base; here when that is this consumer's lane, else forwarded. A
// forward that definitely did not reach a handler tries the lane's other
// instances, then the next fallback level (the failed lane counted as
// dead); one whose outcome is unknown stops, since the target may have run
// the handler, and the message is held for redelivery.
func (r *laneRouter) route(d *delivery, ls *liveSettings) outcome {
	c := r.c
	st := r.state.Load()
	msgLane := d.msg.Lane // base when malformed, counted on receipt
	var live lane.LiveSet = st.snap
	for {
		dec := lane.Route(msgLane, ls.lane, live)
		switch dec.Action {
		case lane.Handle:
			c.met.level(dec.Level)
			return c.handleLocal(d.msg)
		case lane.Hold:
			c.log.Warn("no live consumer can take the message (no base consumer in the group); leaving it for redelivery",
				zap.String("message_id", d.msg.ID), zap.String("lane", msgLane))
			return outcome{kind: held}
		}
		res, err := r.forwardToLane(d, dec.Target, st)
		switch res {
		case fwdHandled:
			c.met.level(dec.Level)
			return outcome{kind: handled}
		case fwdFailed:
			c.met.level(dec.Level)
			return outcome{kind: failed, err: err}
		case fwdUnknown:
			c.log.Warn("forward outcome unknown; leaving the message for redelivery", zap.String("message_id", d.msg.ID),
				zap.String("target", dec.Target), zap.Error(err))
			return outcome{kind: held, err: err}
		}
		// Not delivered anywhere in that lane: fall back one level.
		c.log.Info("no instance of the lane took the message; falling back", zap.String("message_id", d.msg.ID),
			zap.String("lane", dec.Target), zap.Error(err))
		live = lane.Without(live, dec.Target)
	}
}

// forwardToLane offers the message to the instances of one lane, picked by
// health, until one answers definitely. It returns a forwarded_total
// result: fwdHandled, fwdFailed, fwdUnknown, or fwdUnreachable when no
// instance took it.
func (r *laneRouter) forwardToLane(d *delivery, target string, st *routeState) (string, error) {
	p := st.pickers[target]
	if p == nil {
		return fwdUnreachable, fmt.Errorf("lane %q has no instance to forward to", target)
	}
	var (
		tried   []*failover.Handle[lane.Instance]
		lastErr error
	)
	for {
		h, err := p.PickExcluding(tried)
		if err != nil {
			if lastErr == nil {
				lastErr = err
			}
			return fwdUnreachable, lastErr
		}
		tried = append(tried, h)
		start := time.Now()
		res, err := r.fwd.deliver(d, h.Value(), target)
		r.c.met.forwardDone(res, time.Since(start))
		switch res {
		case fwdHandled, fwdFailed:
			took := time.Since(start)
			p.Success(h, took)
			if obs := r.c.opts.forwardObserver; obs != nil {
				obs(took)
			}
			return res, err
		case fwdUnknown:
			p.Failure(h, err)
			return res, err
		case fwdRefused:
			// The instance answered but will not take it (closing, moved
			// lane, bad credential): it is alive, just not a target.
			p.Release(h)
		default:
			p.Down(h, err)
			p.Failure(h, err)
		}
		lastErr = err
	}
}
