package producer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/failover"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/rmqerr"
)

// State is a snapshot of what a Producer is doing, for a health check or
// an operator's page: the configuration in force and, per logic topic,
// cluster and broker, whether it is connected, its failover weight, and
// whether it refuses the producer and why. All of it is plain data, copied
// when State is called.
type State struct {
	// Config is the revision of the configuration this producer applied
	// and the latest version refused, by the configuration watcher
	// (invalid) or by this producer (it could not apply it).
	Config config.Status
	// Topics are the logic topics of the configuration, by name.
	Topics []TopicState
}

// TopicState is one logic topic.
type TopicState struct {
	Name string
	// Shadow is set on the shadow side of a logic topic: its clusters'
	// physical topics are the shadow topics. It comes right after the
	// production side of the same Name.
	Shadow bool
	// Clusters in the configuration's order.
	Clusters []ClusterState
}

// ClusterState is one cluster of a logic topic.
type ClusterState struct {
	Name          string
	PhysicalTopic string
	// Weight is the cluster's configured weight (0: drained).
	Weight int
	// Routed: the cluster's route was read, so its brokers take traffic.
	// A cluster without a route is asked again every second.
	Routed bool
	// Refused is set while the cluster refuses the route query or the
	// client's settings (a topic it lacks, credentials it rejects).
	Refused *Refusal
	// LastError is the latest failed route query, at LastErrorAt.
	LastError   error
	LastErrorAt time.Time
	// Brokers are the brokers of the route with writable queues.
	Brokers []BrokerState
}

// BrokerState is one broker of a cluster, as the sends to it see it.
type BrokerState struct {
	Endpoint string
	// Connected: the client's session with the endpoint (its settings
	// accepted, its command stream open) is up.
	Connected bool
	// Sending: the latest request to the broker did not fail (true before
	// the first one).
	Sending bool
	// Weight is failover's current weight of the broker, MaxWeight its
	// ceiling (its share of the cluster's weight); Down means failover
	// took it out until a probe reaches it.
	Weight    float64
	MaxWeight float64
	Down      bool
	// Refused is set while the broker refuses the producer's requests
	// (a topic it lacks, a permission it denies, a message type the topic
	// does not take): retrying elsewhere may help, retrying here cannot.
	Refused *Refusal
	// LastError is the latest failed request, at LastErrorAt; it stays
	// after later successes, as a record.
	LastError   error
	LastErrorAt time.Time
}

// Refusal is a broker's refusal of this producer, as RocketMQ worded it
// (the one type rmqerr.Refusal, which the producer's State reports too).
type Refusal = rmqerr.Refusal

// State returns a snapshot of the producer's state. It is cheap enough
// for a health check to call on every probe.
func (p *Producer) State() State {
	st := State{Config: p.cfgState.Status(p.watcher)}
	topics := slices.Collect(maps.Values(*p.topics.Load()))
	// By logic topic, each shadow side right after its production side.
	slices.SortFunc(topics, func(a, b *topicState) int {
		if c := strings.Compare(a.logic, b.logic); c != 0 {
			return c
		}
		if a.shadow == b.shadow {
			return 0
		}
		if a.shadow {
			return 1
		}
		return -1
	})
	for _, ts := range topics {
		st.Topics = append(st.Topics, p.topicState(ts))
	}
	return st
}

func (p *Producer) topicState(ts *topicState) TopicState {
	handles := map[*brokerTarget]*failover.Handle[*brokerTarget]{}
	for _, h := range ts.picker.Handles() {
		handles[h.Value()] = h
	}
	type cluster struct {
		c       *clusterEntry
		weight  int
		brokers []*brokerTarget
	}
	p.mu.Lock()
	cs := make([]cluster, 0, len(ts.clusters))
	for _, c := range ts.clusters {
		cs = append(cs, cluster{c: c, weight: c.weight, brokers: slices.Clone(c.brokers)})
	}
	p.mu.Unlock()
	out := TopicState{Name: ts.logic, Shadow: ts.shadow}
	for _, x := range cs {
		route := x.c.link.Snapshot()
		c := ClusterState{Name: x.c.name, PhysicalTopic: x.c.physical, Weight: x.weight, Routed: len(x.brokers) > 0,
			Refused: route.Refusal, LastError: route.LastError, LastErrorAt: route.LastErrorAt}
		for _, b := range x.brokers {
			s := b.link.Snapshot()
			bs := BrokerState{Endpoint: b.endpoint, Connected: b.client.EndpointState(b.endpoint).Connected,
				Sending: !s.Failing, Refused: s.Refusal, LastError: s.LastError, LastErrorAt: s.LastErrorAt}
			if h := handles[b]; h != nil {
				bs.Weight, bs.MaxWeight, bs.Down = h.Weight(), h.MaxWeight(), h.IsDown()
			}
			c.Brokers = append(c.Brokers, bs)
		}
		out.Clusters = append(out.Clusters, c)
	}
	return out
}

// noteRequest records the outcome of a request to t for State. A request
// its senders gave up on (their contexts ended, or their deadlines bound
// it) says nothing of the broker and is not recorded.
func (t *brokerTarget) noteRequest(ctx context.Context, err error, bounded bool, timeout time.Duration) {
	if err == nil {
		t.link.Succeeded()
		return
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		if ctx.Err() != nil || bounded {
			return
		}
		err = fmt.Errorf("send to %s (%s) got no answer within %v: %w", t.endpoint, t.cluster, timeout, driver.ErrTimeout)
	}
	t.link.Failed(err, time.Now())
}

// noteRoute records the outcome of a route query of c for State.
func (c *clusterEntry) noteRoute(err error) {
	if err == nil {
		c.link.Succeeded()
		return
	}
	c.link.Failed(err, time.Now())
}
