package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// outlastWindow: a fault during whose last outlastWindow a send still
// went to its broker outlasted the producer's failover (the producer had
// not left the broker when the fault ended), so its dead-target time is
// cut short by the fault's end.
const outlastWindow = 100 * time.Millisecond

// deadTargets measures how long each fault that leaves a broker unable to
// answer kept the producer's send requests going to it. A gRPC client
// interceptor on the producer's connections sees every SendMessage
// request as it leaves the producer for an endpoint (a first attempt, a
// retry, a batch, all alike); each open watch on that endpoint keeps the
// start of its latest one. When the fault heals, its dead-target time is
// that latest start minus the fault's start (0 when no send went there).
type deadTargets struct {
	mu      sync.Mutex
	watches map[string][]*watch // by endpoint (a proxy's address)
	times   []time.Duration
	outlast int
	byKind  map[string]*KindDeadTarget
	all     []string // every broker's endpoint
}

type watch struct {
	start, last time.Time
	n           int // requests sent to the endpoint during the fault
	// others: how many of them were sent while another broker was
	// under no fault that makes it unable to answer.
	others int
}

func newDeadTargets(endpoints []string) *deadTargets {
	return &deadTargets{watches: map[string][]*watch{}, byKind: map[string]*KindDeadTarget{}, all: endpoints}
}

// interceptor notes each SendMessage request by its endpoint.
func (d *deadTargets) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption,
) error {
	if strings.HasSuffix(method, "/SendMessage") {
		now := time.Now()
		d.mu.Lock()
		if ws := d.watches[cc.Target()]; len(ws) > 0 {
			other := slices.ContainsFunc(d.all, func(ep string) bool { return len(d.watches[ep]) == 0 })
			for _, w := range ws {
				w.last = now
				w.n++
				if other {
					w.others++
				}
			}
		}
		d.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// begin starts watching the endpoints of the brokers a fault has just
// made unable to answer; the returned end closes the watches when the
// fault has healed and records their times.
func (d *deadTargets) begin(kind string, endpoints ...string) (end func()) {
	now := time.Now()
	ws := make([]*watch, len(endpoints))
	d.mu.Lock()
	for i, ep := range endpoints {
		ws[i] = &watch{start: now}
		d.watches[ep] = append(d.watches[ep], ws[i])
	}
	d.mu.Unlock()
	return func() {
		healed := time.Now()
		d.mu.Lock()
		defer d.mu.Unlock()
		k := d.byKind[kind]
		if k == nil {
			k = &KindDeadTarget{}
			d.byKind[kind] = k
		}
		for i, ep := range endpoints {
			w := ws[i]
			d.watches[ep] = slices.DeleteFunc(d.watches[ep], func(o *watch) bool { return o == w })
			var t time.Duration
			if !w.last.IsZero() {
				t = w.last.Sub(w.start)
				if healed.Sub(w.last) < outlastWindow {
					d.outlast++
					k.Outlasted++
				}
			}
			d.times = append(d.times, t)
			k.N++
			k.Requests += w.n
			k.RequestsOthersUp += w.others
			k.Max = max(k.Max, t)
		}
	}
}

// report fills r's dead-target figures.
func (d *deadTargets) report(r *Report) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ts := slices.Clone(d.times)
	slices.Sort(ts)
	r.DeadTargets = len(ts)
	r.DeadTargetOutlasted = d.outlast
	r.DeadTargetByKind = map[string]KindDeadTarget{}
	for kind, k := range d.byKind {
		r.DeadTargetByKind[kind] = *k
	}
	if len(ts) > 0 {
		r.MaxDeadTarget = ts[len(ts)-1]
		r.P50DeadTarget = ts[len(ts)/2]
		r.P99DeadTarget = ts[(len(ts)*99)/100]
	}
}

// KindDeadTarget is the dead-target times of one kind of fault: how many
// (fault, broker) pairs, the longest, and how many outlasted the producer.
type KindDeadTarget struct {
	N         int
	Max       time.Duration
	Outlasted int
	// Requests: send requests that went to the brokers while they could
	// not answer.
	Requests int
	// RequestsOthersUp: those of them sent while another broker was
	// under no such fault (somewhere else to go).
	RequestsOthersUp int
}

func (k KindDeadTarget) String() string {
	return fmt.Sprintf("%d max=%v outlasted=%d requests=%d (others up %d)", k.N, k.Max.Round(time.Millisecond), k.Outlasted, k.Requests, k.RequestsOthersUp)
}
