package consumer

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

// Test-wide settings: short invisible times and polls (the embedded broker
// allows them) keep redelivery tests fast; the liveness timeouts are
// generous, since the machine running the tests may be busy.
const (
	testInvisible = 2 * time.Second
	testPolling   = 200 * time.Millisecond
	testToken     = "group-secret"
	waitLong      = 60 * time.Second
)

// startEnv starts two embedded clusters of two brokers each with the
// topic and the group, and stops them when the test ends.
func startEnv(t testing.TB, topic string, groups ...embedded.Group) *embedded.Env {
	t.Helper()
	return startEnvTopics(t, []string{topic}, groups...)
}

func startEnvTopics(t testing.TB, topics []string, groups ...embedded.Group) *embedded.Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ts []embedded.Topic
	for _, name := range topics {
		ts = append(ts, embedded.Topic{Name: name, Queues: 4, Type: embedded.Mixed})
	}
	env, err := embedded.Start(ctx, embedded.Options{
		Dir:                  t.TempDir(),
		Topics:               ts,
		Groups:               groups,
		MinInvisibleDuration: 100 * time.Millisecond,
		MinLongPolling:       50 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.Close(ctx)
	})
	return env
}

// docFor maps the logic topic onto the physical topic of the same name on
// every cluster of env, with the group's settings.
func docFor(env *embedded.Env, topic, group string, cs config.Consumer) *config.Config {
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{topic: env.TopicConfig(topic)}
	if cs.Concurrency == 0 {
		cs.Concurrency = 8
	}
	if cs.MaxAttempts == 0 {
		cs.MaxAttempts = 5
	}
	cs.Mode = config.ModeDirect
	cfg.Consumers = map[string]config.Consumer{group: cs}
	cfg.Lanes.LeaseTTL = config.Duration(2 * time.Second)
	cfg.Lanes.ForwardTimeout = config.Duration(5 * time.Second)
	return cfg
}

// newConsumer starts a consumer and closes it when the test ends.
func newConsumer(t testing.TB, group, topic string, h Handler, opts ...Option) *Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts = append([]Option{WithInvisibleDuration(testInvisible), WithLongPolling(testPolling)}, opts...)
	c, err := New(ctx, group, topic, h, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// sender produces straight to chosen clusters with the driver, so a test
// decides where every message is stored.
type sender struct {
	t      testing.TB
	env    *embedded.Env
	topic  string
	client *driver.Client
}

func newSender(t testing.TB, env *embedded.Env, topic string) *sender {
	t.Helper()
	c, err := driver.New(driver.Config{Type: driver.Producer, Topics: []string{topic}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return &sender{t: t, env: env, topic: topic, client: c}
}

// send stores n messages of the lane on the given cluster (spread over its
// brokers) and returns their ids.
func (s *sender) send(cluster, n int, ln string) []string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps := s.env.Clusters()[cluster].Endpoints()
	var ids []string
	for i := 0; i < n; i++ {
		m := &driver.Message{Topic: s.topic, Body: []byte(fmt.Sprintf("body-%d-%s", i, ln)), QueueID: driver.AnyQueue}
		if ln != "" {
			m.Properties = map[string]string{lane.PropertyLane: ln}
		}
		// A broker that just restarted may refuse the first calls while the
		// connection comes back; retry as a producer would.
		var res []driver.SendResult
		var err error
		for {
			res, err = s.client.Send(ctx, eps[i%len(eps)], []*driver.Message{m})
			if err == nil || !driver.Retryable(err) || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(s.t, err)
		ids = append(ids, res[0].MessageID)
	}
	return ids
}

// record counts, per message id, which consumers' handlers ran it and
// with which result.
type record struct {
	mu      sync.Mutex
	ok      map[string][]string // id -> names of the consumers that succeeded
	seen    map[string]int      // id -> handler runs
	badLane []string
	changed chan struct{}
}

func newRecord() *record {
	return &record{ok: map[string][]string{}, seen: map[string]int{}, changed: make(chan struct{}, 1)}
}

// handler returns a handler for the consumer named name that succeeds and
// checks that its ctx carries the message's lane.
func (r *record) handler(name string) Handler {
	return func(ctx context.Context, m *Message) error {
		got, _ := lane.FromContext(ctx)
		r.mu.Lock()
		if got != m.Lane || got != m.Properties[lane.PropertyLane] {
			r.badLane = append(r.badLane, fmt.Sprintf("%s: ctx lane %q, message lane %q", m.ID, got, m.Lane))
		}
		r.seen[m.ID]++
		r.ok[m.ID] = append(r.ok[m.ID], name)
		r.mu.Unlock()
		select {
		case r.changed <- struct{}{}:
		default:
		}
		return nil
	}
}

// waitHandled waits until every id was handled at least once.
func (r *record) waitHandled(t testing.TB, ids []string) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		r.mu.Lock()
		missing := 0
		for _, id := range ids {
			if len(r.ok[id]) == 0 {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages were not handled within %v", missing, len(ids), waitLong)
		}
		select {
		case <-r.changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// handlers returns the distinct consumers that handled id, sorted.
func (r *record) handlers(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := map[string]bool{}
	for _, n := range r.ok[id] {
		set[n] = true
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// duplicates counts the handler runs beyond the first, over all messages.
func (r *record) duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.seen {
		n += v - 1
	}
	return n
}

// waitIdle waits until the consumer has settled everything it received.
func waitIdle(t testing.TB, cs ...*Consumer) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for _, c := range cs {
		for c.inflight.inUse() > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("consumer still has %d messages in flight", c.inflight.inUse())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// drainTopic receives everything waiting in a topic (the dead-letter topic
// of a group, say) on every running broker, without acking.
func drainTopic(t testing.TB, env *embedded.Env, topic, group string) []*driver.ReceivedMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := driver.New(driver.Config{Type: driver.SimpleConsumer, Group: group,
		Subscriptions: []driver.Subscription{{Topic: topic}}})
	require.NoError(t, err)
	defer func() { _ = c.Close(ctx) }()
	var out []*driver.ReceivedMessage
	for _, cl := range env.Clusters() {
		for _, b := range cl.Brokers() {
			if !b.Running() {
				continue
			}
			route, err := c.QueryRoute(ctx, b.Endpoint(), topic)
			if err != nil {
				continue
			}
			for _, q := range route.ReadableQueues() {
				if q.Endpoint != b.Endpoint() {
					continue
				}
				for {
					msgs, err := c.Receive(ctx, driver.ReceiveRequest{Queue: q, BatchSize: 32,
						InvisibleDuration: time.Minute, LongPollingTimeout: 50 * time.Millisecond})
					if err != nil || len(msgs) == 0 {
						break
					}
					out = append(out, msgs...)
				}
			}
		}
	}
	return out
}
