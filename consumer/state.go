package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/rmqerr"
)

// ErrRefused is wrapped by New's error when every cluster of the topic
// refused this consumer: nothing could ever be received. The error also
// wraps a *Refusal per cluster (errors.As finds the first), with
// RocketMQ's code and message.
var ErrRefused = errors.New("consumer: every cluster refused this consumer")

// State is a snapshot of what a Consumer is doing, for a health check or
// an operator's page: the configuration in force and, per cluster and
// broker, whether it is connected, receiving, or refused and why. All of
// it is plain data, copied when State is called.
type State struct {
	Group string
	Topic string
	// Lane is the lane this consumer serves ("" = base).
	Lane string
	// Config is the revision of the configuration this consumer applied
	// and the latest version refused, by the configuration watcher
	// (invalid) or by this consumer (it could not apply it).
	Config config.Status
	// Clusters are the clusters of the topic being consumed, in the
	// configuration's order.
	Clusters []ClusterState
}

// ClusterState is one cluster of the topic.
type ClusterState struct {
	Name          string
	PhysicalTopic string
	// Routed: the cluster's route was read, so its brokers are known and
	// receiving from them has started. A cluster without a route is asked
	// again every 5 s.
	Routed bool
	// Refused is set while the cluster refuses this consumer before any
	// broker could be received from: the client's settings or the route
	// query were refused (a group the servers do not know, credentials
	// they reject, a topic they lack).
	Refused *Refusal
	// LastError is the latest failed route query, at LastErrorAt.
	LastError   error
	LastErrorAt time.Time
	// Brokers are the brokers receiving is running for, by name and
	// endpoint.
	Brokers []BrokerState
}

// BrokerState is one broker of a cluster.
type BrokerState struct {
	// Name is the broker's name in the route; Endpoint where it is
	// reached (a RocketMQ proxy serves several brokers at one endpoint).
	Name     string
	Endpoint string
	// Connected: the client's session with the endpoint (its settings
	// accepted, its command stream open) is up.
	Connected bool
	// Receiving: the latest receive from this broker did not fail. A
	// receive may wait for messages for the whole long-polling time, so
	// this says "not failing", not "a message arrived".
	Receiving bool
	// Refused is set while the broker refuses the receives (settings below
	// its floors, a group it does not know): retrying cannot mend it.
	Refused *Refusal
	// LastError is the latest failed receive, at LastErrorAt; it stays
	// after later successes, as a record.
	LastError   error
	LastErrorAt time.Time
}

// Refusal is a broker's refusal of this consumer, as RocketMQ worded it
// (the one type rmqerr.Refusal, which the producer's State reports too).
type Refusal = rmqerr.Refusal

// State returns a snapshot of the consumer's state. It is cheap enough
// for a health check to call on every probe.
func (c *Consumer) State() State {
	st := State{Group: c.group, Topic: c.topic, Lane: c.Lane(), Config: c.cfgState.Status(c.watcher)}
	c.mu.Lock()
	clusters := slices.Clone(c.clusters)
	c.mu.Unlock()
	for _, cr := range clusters {
		st.Clusters = append(st.Clusters, cr.state())
	}
	return st
}

func (cr *clusterRunner) state() ClusterState {
	route := cr.link.Snapshot()
	cs := ClusterState{Name: cr.name, PhysicalTopic: cr.physical, Refused: route.Refusal,
		LastError: route.LastError, LastErrorAt: route.LastErrorAt}
	cr.mu.Lock()
	loops := make([]*brokerLoop, 0, len(cr.brokers))
	for _, bl := range cr.brokers {
		loops = append(loops, bl)
	}
	cr.mu.Unlock()
	cs.Routed = len(loops) > 0
	slices.SortFunc(loops, func(a, b *brokerLoop) int {
		return strings.Compare(a.queue.Broker+"@"+a.endpoint, b.queue.Broker+"@"+b.endpoint)
	})
	for _, bl := range loops {
		s := bl.link.Snapshot()
		cs.Brokers = append(cs.Brokers, BrokerState{
			Name: bl.queue.Broker, Endpoint: bl.endpoint,
			Connected: cr.client.EndpointState(bl.endpoint).Connected,
			Receiving: !s.Failing, Refused: s.Refusal,
			LastError: s.LastError, LastErrorAt: s.LastErrorAt,
		})
	}
	return cs
}

// refusedEverywhere is New's check: when no cluster could be routed and
// every one refused, nothing will ever be received, and New fails with
// ErrRefused and the refusals.
func (c *Consumer) refusedEverywhere() error {
	var refusals []error
	for _, cr := range c.clusters {
		s := cr.state()
		if s.Routed || s.Refused == nil {
			return nil
		}
		refusals = append(refusals, fmt.Errorf("cluster %q: %w", cr.name, s.Refused))
	}
	if len(refusals) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrRefused, errors.Join(refusals...))
}

// warnUnlistedGroup says once, at New, that the configuration does not
// list this consumer's group: it runs on the defaults.
func (c *Consumer) warnUnlistedGroup(cfg *config.Config) {
	if _, ok := cfg.Consumers[c.group]; ok {
		return
	}
	c.log.Warn("the configuration has no consumers entry for this group; it runs on the defaults",
		zap.Int("concurrency", config.DefaultConcurrency), zap.Int("max_attempts", config.DefaultMaxAttempts))
}

// verify runs a message a broker sent for verification (an operator's
// "consume this message directly") through the handler here, whatever its
// lane, within the concurrency limit, as RocketMQ's push consumer runs it
// through its listener. Nothing is settled: the message is not this
// consumer's delivery.
func (c *Consumer) verify(ctx context.Context, cluster string, raw *driver.ReceivedMessage) error {
	if c.closed.Load() {
		return errClosed
	}
	if err := c.slots.acquire(ctx); err != nil {
		return err
	}
	defer c.slots.release(1)
	c.log.Info("a broker asked to verify a message; running the handler", zap.String("cluster", cluster),
		zap.String("endpoint", raw.Endpoint), zap.String("message_id", raw.ID))
	return c.runHandler(ctx, newMessage(c.topic, cluster, raw))
}
