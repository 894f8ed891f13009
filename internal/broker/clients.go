package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// ErrClientNotConnected: SendCommand found no open Telemetry stream for the
// client id.
var ErrClientNotConnected = errors.New("broker: client has no open telemetry stream")

// client is what the broker knows of one client instance (x-mq-client-id):
// the Settings it sent on Telemetry, when it was last heard of, and its open
// Telemetry stream, the only path for server-to-client commands.
type client struct {
	id       string
	settings *rmqpb.Settings
	lastSeen atomic.Int64 // unix nanos
	stream   *telemetryStream
}

// telemetryStream serializes writes to one Telemetry stream.
type telemetryStream struct {
	mu  sync.Mutex
	srv grpc.BidiStreamingServer[rmqpb.TelemetryCommand, rmqpb.TelemetryCommand]
}

func (t *telemetryStream) send(cmd *rmqpb.TelemetryCommand) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.srv.Send(cmd)
}

func (b *Broker) touchClient(id string, now time.Time) {
	if id == "" {
		return
	}
	b.mu.RLock()
	c := b.clients[id]
	b.mu.RUnlock()
	if c == nil {
		b.mu.Lock()
		if c = b.clients[id]; c == nil {
			c = &client{id: id}
			b.clients[id] = c
		}
		b.mu.Unlock()
	}
	c.lastSeen.Store(now.UnixNano())
}

func (c *client) idle(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, c.lastSeen.Load()))
}

// clientAlive: an open Telemetry stream, or heard of within ClientIdle.
func (b *Broker) clientAlive(id string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	c := b.clients[id]
	return c != nil && (c.stream != nil || c.idle(time.Now()) < b.cfg.Limits.ClientIdle)
}

func (b *Broker) expireClients(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, c := range b.clients {
		if c.stream == nil && c.idle(now) >= b.cfg.Limits.ClientIdle {
			delete(b.clients, id)
		}
	}
}

// forgetClient drops a client that announced its termination.
func (b *Broker) forgetClient(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.clients, id)
}

func (b *Broker) clientSettings(id string) *rmqpb.Settings {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if c := b.clients[id]; c != nil {
		return c.settings
	}
	return nil
}

func (b *Broker) attachStream(id string, ts *telemetryStream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.clients[id]
	if c == nil {
		c = &client{id: id}
		b.clients[id] = c
	}
	c.stream = ts
	c.lastSeen.Store(time.Now().UnixNano())
}

func (b *Broker) detachStream(id string, ts *telemetryStream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.clients[id]; c != nil && c.stream == ts {
		c.stream = nil
		c.lastSeen.Store(time.Now().UnixNano())
	}
}

// SendCommand writes a server command (for example a transaction check-back,
// RecoverOrphanedTransactionCommand) on the client's open Telemetry stream.
// The context bounds the wait for the stream's write lock only: gRPC writes
// themselves are flow-controlled and cannot be cancelled.
func (b *Broker) SendCommand(ctx context.Context, clientID string, cmd *rmqpb.TelemetryCommand) error {
	b.mu.RLock()
	var ts *telemetryStream
	if c := b.clients[clientID]; c != nil {
		ts = c.stream
	}
	b.mu.RUnlock()
	if ts == nil {
		return fmt.Errorf("%w: %s", ErrClientNotConnected, clientID)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return ts.send(cmd)
}

// Producers lists the client ids with an open Telemetry stream whose
// Settings publish to topic, sorted: the candidates for a transaction
// check-back.
func (b *Broker) Producers(topic string) []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []string
	for id, c := range b.clients {
		if c.stream == nil || c.settings.GetClientType() != rmqpb.ClientType_PRODUCER {
			continue
		}
		for _, t := range c.settings.GetPublishing().GetTopics() {
			if t.GetName() == topic {
				out = append(out, id)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// defaultRetryBackoff is RocketMQ's default customized retry policy of a
// consumer group.
func defaultRetryBackoff() []time.Duration {
	return []time.Duration{
		time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute,
		6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute,
		20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
	}
}

// applySettings validates a client's Settings, stores them and returns the
// merged Settings the proxy echoes.
func (b *Broker) applySettings(clientID string, s *rmqpb.Settings) (*rmqpb.Settings, error) {
	merged := proto.Clone(s).(*rmqpb.Settings)
	merged.Metric = &rmqpb.Metric{On: false}
	switch s.GetClientType() {
	case rmqpb.ClientType_PRODUCER:
		pub := s.GetPublishing()
		if pub == nil {
			return nil, statusErr(rmqpb.Code_BAD_REQUEST, "settings of a producer carry no publishing")
		}
		for _, t := range pub.GetTopics() {
			if err := checkTopicName(t.GetName()); err != nil {
				return nil, statusErr(rmqpb.Code_ILLEGAL_TOPIC, "topic %q is illegal: %v", t.GetName(), err)
			}
		}
		merged.BackoffPolicy = &rmqpb.RetryPolicy{
			MaxAttempts: 3,
			Strategy: &rmqpb.RetryPolicy_ExponentialBackoff{ExponentialBackoff: &rmqpb.ExponentialBackoff{
				Initial: durationpb.New(10 * time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 2,
			}},
		}
		mp := merged.GetPublishing()
		mp.MaxBodySize = int32(b.cfg.Limits.MaxBodySize)
		mp.ValidateMessageType = true
	case rmqpb.ClientType_PUSH_CONSUMER, rmqpb.ClientType_SIMPLE_CONSUMER:
		sub := s.GetSubscription()
		if sub == nil {
			return nil, statusErr(rmqpb.Code_BAD_REQUEST, "settings of a consumer carry no subscription")
		}
		name := sub.GetGroup().GetName()
		if err := checkGroupName(name); err != nil {
			return nil, statusErr(rmqpb.Code_ILLEGAL_CONSUMER_GROUP, "consumer group %q is illegal: %v", name, err)
		}
		for _, e := range sub.GetSubscriptions() {
			if err := checkTopicName(e.GetTopic().GetName()); err != nil && !isDLQTopic(e.GetTopic().GetName()) {
				return nil, statusErr(rmqpb.Code_ILLEGAL_TOPIC, "topic %q is illegal: %v", e.GetTopic().GetName(), err)
			}
			if _, err := parseFilter(e.GetExpression()); err != nil {
				return nil, err
			}
		}
		g, err := b.group(name)
		if err != nil {
			return nil, err
		}
		ms := merged.GetSubscription()
		ms.Fifo = proto.Bool(g.FIFO)
		ms.ReceiveBatchSize = proto.Int32(int32(b.cfg.Limits.MaxBatchSize))
		ms.LongPollingTimeout = durationpb.New(b.cfg.Limits.MaxLongPolling)
		backoff := g.RetryBackoff
		if len(backoff) == 0 {
			backoff = defaultRetryBackoff()
		}
		next := make([]*durationpb.Duration, len(backoff))
		for i, d := range backoff {
			next[i] = durationpb.New(d)
		}
		merged.BackoffPolicy = &rmqpb.RetryPolicy{
			MaxAttempts: int32(g.MaxDeliveryAttempts),
			Strategy:    &rmqpb.RetryPolicy_CustomizedBackoff{CustomizedBackoff: &rmqpb.CustomizedBackoff{Next: next}},
		}
	default:
		return nil, statusErr(rmqpb.Code_UNRECOGNIZED_CLIENT_TYPE, "unrecognized client type %v", s.GetClientType())
	}
	b.mu.Lock()
	c := b.clients[clientID]
	if c == nil {
		c = &client{id: clientID}
		b.clients[clientID] = c
	}
	c.settings = proto.Clone(s).(*rmqpb.Settings)
	c.lastSeen.Store(time.Now().UnixNano())
	b.mu.Unlock()
	return merged, nil
}

func isDLQTopic(name string) bool {
	return len(name) > len(dlqPrefix) && name[:len(dlqPrefix)] == dlqPrefix && checkGroupName(name[len(dlqPrefix):]) == nil
}
