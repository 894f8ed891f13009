package producer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/failover"
	"github.com/twinmq/twinmq/internal/clientstate"
	"github.com/twinmq/twinmq/internal/driver"
)

// brokerTarget is one broker endpoint of one cluster serving one logic
// topic: the unit failover weighs. Its identity fields never change; a
// route refresh that moves queues swaps the queue list only.
type brokerTarget struct {
	topic    string // logic topic
	cluster  string
	physical string
	endpoint string
	client   wireClient

	queues atomic.Pointer[[]int32]
	// current and sinceRotate implement the sticky queue: messages go to
	// one queue of the broker until rotateBytes were put there, then to the
	// next. A per-message round robin would split the traffic of a broker
	// into as many small batches as it has queues.
	current     atomic.Uint64
	sinceRotate atomic.Int64

	ok, failed, retried prometheus.Counter // nil without metrics
	link                clientstate.Link   // of the requests (State)
}

// queue returns the queue for a message of size bytes.
func (t *brokerTarget) queue(size int, rotateBytes int64) int32 {
	qs := *t.queues.Load()
	if len(qs) == 0 {
		return driver.AnyQueue
	}
	if t.sinceRotate.Add(int64(size)) >= rotateBytes {
		t.sinceRotate.Store(0)
		t.current.Add(1)
	}
	return qs[t.current.Load()%uint64(len(qs))]
}

// queueFor returns the queue a FIFO message group maps to.
func (t *brokerTarget) queueFor(hash uint64) int32 {
	qs := *t.queues.Load()
	if len(qs) == 0 {
		return driver.AnyQueue
	}
	return qs[hash%uint64(len(qs))]
}

// clusterEntry is one cluster of a logic topic as the current configuration
// describes it, with the brokers its route lists.
type clusterEntry struct {
	// Identity: fixed for the entry's life (a change makes a new entry).
	name      string
	endpoints []string
	physical  string
	clientKey string
	client    wireClient

	// Guarded by Producer.mu.
	weight   int
	priority int
	brokers  []*brokerTarget
	routeSig string
	routing  bool             // a route query runs
	routeErr error            // of the last route query, nil once one succeeded
	link     clientstate.Link // of the route queries (State)
}

// sameAs reports whether c describes the same cluster as n, so that its
// known route and broker health carry over a reload.
func (c *clusterEntry) sameAs(n config.Cluster, physical, clientKey string) bool {
	return c.name == n.Name && c.physical == physical && c.clientKey == clientKey &&
		slices.Equal(c.endpoints, n.Endpoints)
}

// topicState is a logic topic: its clusters and the failover picker over
// their brokers. It lives as long as the topic is configured: a reload
// updates its clusters, the picker's resource set (which keeps the health
// of brokers that stay) and the picker's tuning in place, so sends in
// flight, route lookups in flight and the metric series all go on with the
// one state.
type topicState struct {
	name    string // the logic topic, or shadowKey of it for its shadow side
	logic   string // the logic topic
	shadow  bool   // the shadow side of the logic topic (see shadow.go)
	picker  *failover.Picker[*brokerTarget]
	fcfg    config.Failover     // guarded by Producer.mu
	latency prometheus.Observer // nil without metrics
	spread  spread

	// Guarded by Producer.mu.
	clusters []*clusterEntry
}

// resourceKey names a broker in the picker, the metrics and the logs.
func resourceKey(cluster, endpoint string) string { return cluster + "/" + endpoint }

// resourcesLocked builds the picker's resource set: every broker of every
// cluster with a positive weight. A cluster's weight is split evenly over
// its brokers, so that the configured weights are shares of clusters
// whatever their size. Weight 0 drains a cluster: it is left out.
func (ts *topicState) resourcesLocked() []failover.Resource[*brokerTarget] {
	var rs []failover.Resource[*brokerTarget]
	for _, c := range ts.clusters {
		if c.weight <= 0 || len(c.brokers) == 0 {
			continue
		}
		w := float64(c.weight) / float64(len(c.brokers))
		for _, b := range c.brokers {
			rs = append(rs, failover.Resource[*brokerTarget]{
				Key:       resourceKey(c.name, b.endpoint),
				Cluster:   c.name,
				Endpoint:  b.endpoint,
				Value:     b,
				Priority:  c.priority,
				MaxWeight: w,
				MinWeight: ts.fcfg.MinWeight * w,
			})
		}
	}
	return rs
}

// newPicker builds a topic's picker from the failover section. A down
// broker is probed with a heartbeat, which fails fast on a dead endpoint
// and succeeds as soon as a restarted broker serves again.
func (p *Producer) newPicker(topic string, fc config.Failover) (*failover.Picker[*brokerTarget], error) {
	return failover.New(nil, p.pickerConfig(topic, fc))
}

// pickerConfig is the failover tuning of a topic's picker: New takes it
// once, Reconfigure on every reload that changes the failover section.
func (p *Producer) pickerConfig(topic string, fc config.Failover) failover.Config[*brokerTarget] {
	return failover.Config[*brokerTarget]{
		FailureFactor: fc.FailureFactor,
		SuccessStep:   fc.Recovery,
		CheckInterval: fc.ProbeInterval.D(),
		Checker: func(ctx context.Context, h *failover.Handle[*brokerTarget]) error {
			t := h.Value()
			return t.client.Heartbeat(ctx, t.endpoint)
		},
		Name:       "producer/" + topic,
		Registerer: p.opts.Registerer,
		Logger:     p.log,
	}
}

// physicalOf is the physical topic of a cluster of a logic topic: the
// cluster's topic, or the logic topic's own name.
func physicalOf(logic string, c config.Cluster) string {
	if c.Topic != "" {
		return c.Topic
	}
	return logic
}

// clientKeyOf tells apart the RocketMQ clients a configuration needs: one
// per cluster (by name, so that the client's metrics carry its cluster),
// protocol and combination of TLS and credentials, shared by the logic
// topics on it. A remoting cluster's key also holds its name servers,
// which its client is made with: a reload that changes them (or the
// protocol) swaps the client.
func clientKeyOf(cfg *config.Config, c config.Cluster) (string, *driver.Credentials) {
	var cred *driver.Credentials
	key := fmt.Sprintf("cluster=%s|tls=%t", c.Name, c.TLS)
	if c.Protocol.Remoting() {
		key += "|protocol=remoting|nameservers=" + strings.Join(c.Endpoints, ",")
	}
	if c.Credentials != "" {
		cr := cfg.Credentials[c.Credentials]
		cred = &driver.Credentials{AccessKey: cr.AccessKey, SecretKey: cr.AccessSecret}
		key += "|ak=" + cr.AccessKey + "|sk=" + config.Revision([]byte(cr.AccessSecret))
	}
	return key, cred
}

// routeSignature summarizes the writable queues of a route, to notice when
// a refresh changed anything.
func routeSignature(byEndpoint map[string][]int32, order []string) string {
	var b strings.Builder
	for _, ep := range order {
		fmt.Fprintf(&b, "%s%v;", ep, byEndpoint[ep])
	}
	return b.String()
}

// refreshCluster asks c's access points for the route of its physical topic
// (the driver caches it and refreshes it in the background) and, when the
// brokers or queues changed, updates the topic's brokers and picker.
func (p *Producer) refreshCluster(ctx context.Context, ts *topicState, c *clusterEntry) error {
	var (
		route   *driver.Route
		lastErr error
	)
	for _, ap := range c.endpoints {
		cctx, cancel := context.WithTimeout(ctx, p.settings.Load().requestTimeout)
		r, err := c.client.Route(cctx, ap, c.physical)
		cancel()
		if err == nil {
			route = r
			break
		}
		lastErr = err
	}
	if route == nil {
		return fmt.Errorf("route of topic %q on cluster %q: %w", c.physical, c.name, lastErr)
	}
	byEndpoint := map[string][]int32{}
	for _, q := range route.WritableQueues() {
		byEndpoint[q.Endpoint] = append(byEndpoint[q.Endpoint], q.ID)
	}
	order := slices.Sorted(maps.Keys(byEndpoint))
	for _, ids := range byEndpoint {
		slices.Sort(ids)
	}
	sig := routeSignature(byEndpoint, order)

	p.mu.Lock()
	defer p.mu.Unlock()
	if c.routeSig == sig {
		return nil
	}
	old := map[string]*brokerTarget{}
	for _, b := range c.brokers {
		old[b.endpoint] = b
	}
	brokers := make([]*brokerTarget, 0, len(order))
	for _, ep := range order {
		qs := byEndpoint[ep]
		b := old[ep]
		if b == nil {
			b = p.newTarget(ts, c, ep)
		}
		b.queues.Store(&qs)
		brokers = append(brokers, b)
	}
	c.brokers, c.routeSig = brokers, sig
	if err := ts.picker.Update(ts.resourcesLocked()); err != nil {
		return fmt.Errorf("topic %q: update failover set: %w", ts.name, err)
	}
	ts.spread.reset()
	p.log.Info("route updated", zap.String("topic", ts.name), zap.String("cluster", c.name),
		zap.String("physical_topic", c.physical), zap.Strings("brokers", order))
	return nil
}

func (p *Producer) newTarget(ts *topicState, c *clusterEntry, endpoint string) *brokerTarget {
	b := &brokerTarget{topic: ts.logic, cluster: c.name, physical: c.physical, endpoint: endpoint, client: c.client}
	empty := []int32{}
	b.queues.Store(&empty)
	if m := p.metrics; m != nil {
		sh := shadowLabel(ts.shadow)
		b.ok = m.sends.WithLabelValues(ts.logic, c.name, resultOK, sh)
		b.failed = m.sends.WithLabelValues(ts.logic, c.name, resultError, sh)
		b.retried = m.sends.WithLabelValues(ts.logic, c.name, resultRetried, sh)
	}
	return b
}

// refreshAll refreshes the routes of every cluster of every topic, each in
// its own goroutine so a hanging access point delays no other cluster, and
// waits for them. A cluster whose query still runs is skipped.
func (p *Producer) refreshAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ts := range *p.topics.Load() {
		p.mu.Lock()
		clusters := slices.Clone(ts.clusters)
		p.mu.Unlock()
		for _, c := range clusters {
			p.mu.Lock()
			busy := c.routing
			c.routing = true
			p.mu.Unlock()
			if busy {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := p.refreshCluster(ctx, ts, c)
				p.mu.Lock()
				c.routing = false
				if err != nil && ctx.Err() != nil {
					// Cut short: it says nothing of the cluster.
					p.mu.Unlock()
					return
				}
				changed := (err == nil) != (c.routeErr == nil) || err != nil && err.Error() != c.routeErr.Error()
				c.routeErr = err
				c.noteRoute(err)
				p.mu.Unlock()
				switch {
				case err != nil && changed:
					// A topic missing on the cluster, refused credentials,
					// an unreachable access point: said once at Warn, then
					// at Debug while it lasts.
					p.log.Warn("route of a cluster unavailable; its brokers take no traffic", zap.String("topic", ts.name),
						zap.String("cluster", c.name), zap.Error(err))
				case err != nil:
					p.log.Debug("route refresh failed", zap.String("topic", ts.name),
						zap.String("cluster", c.name), zap.Error(err))
				}
			}()
		}
	}
	wg.Wait()
}
