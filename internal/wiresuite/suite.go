package wiresuite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Backend describes one server the suite runs against.
type Backend struct {
	// Name labels the backend in failure messages, e.g. "embedded".
	Name string
	// Endpoint is the access point ("host:port") routes are asked from.
	Endpoint string
	// MinInvisible is the smallest invisible duration a plain receive may
	// ask for: 10 s on a real proxy, lower on a test broker.
	MinInvisible time.Duration
	// MinLongPolling is the shortest long poll the server holds a receive
	// for (5 s on a real proxy). Receives that expect nothing wait this
	// long.
	MinLongPolling time.Duration
	// RedeliveryLag bounds how long after its invisible time ended a
	// message may take to be delivered again (a real broker revives popped
	// messages in the background, seconds late). It only sizes deadlines.
	RedeliveryLag time.Duration
	// Logger receives the drivers' logs; nil means none.
	Logger *zap.Logger
}

func (b Backend) validate() error {
	switch {
	case b.Endpoint == "":
		return errors.New("Backend.Endpoint is empty")
	case b.MinInvisible <= 0 || b.MinLongPolling <= 0 || b.RedeliveryLag <= 0:
		return errors.New("Backend.MinInvisible, MinLongPolling and RedeliveryLag must be positive")
	}
	if _, _, err := net.SplitHostPort(b.Endpoint); err != nil {
		return fmt.Errorf("Backend.Endpoint %q: %w", b.Endpoint, err)
	}
	return nil
}

// Names of the topics (all of message type NORMAL) and consumer groups the
// suite uses. A backend must provide every one of them.
const (
	TopicSend      = "wire_send"
	TopicBatch     = "wire_batch"
	TopicAck       = "wire_ack"
	TopicRedeliver = "wire_redeliver"
	TopicNack      = "wire_nack"
	TopicDLQ       = "wire_dlq"
	TopicForward   = "wire_fwd"
	TopicFilter    = "wire_filter"

	GroupBatch     = "wire_batch_group"
	GroupAck       = "wire_ack_group"
	GroupRedeliver = "wire_redeliver_group"
	GroupNack      = "wire_nack_group"
	// GroupDLQ dead-letters after DLQMaxAttempts deliveries.
	GroupDLQ     = "wire_dlq_group"
	GroupForward = "wire_fwd_group"
	GroupFilter  = "wire_filter_group"
	// GroupBad is used by the bad-input cases on TopicSend.
	GroupBad = "wire_bad_group"
	// GroupDLQReader reads the dead-letter topics of GroupDLQ and
	// GroupForward.
	GroupDLQReader = "wire_dlq_reader"

	// DLQMaxAttempts is GroupDLQ's maximum number of deliveries (a real
	// broker's retryMaxTimes is one less).
	DLQMaxAttempts = 2

	// topicMissing is a topic no backend has.
	topicMissing = "wire_no_such_topic"
	// maxBody is the protocol's body limit, 4 MiB.
	maxBody = 4 << 20
)

// Group is a consumer group the suite needs.
type Group struct {
	Name string
	// MaxDeliveryAttempts before the dead-letter topic; 0 means the
	// backend's default (17 on RocketMQ).
	MaxDeliveryAttempts int
}

// Topics returns the NORMAL topics a backend must provide, the dead-letter
// topics of GroupDLQ and GroupForward included.
func Topics() []string {
	return []string{
		TopicSend, TopicBatch, TopicAck, TopicRedeliver, TopicNack, TopicDLQ, TopicForward, TopicFilter,
		driver.DeadLetterTopic(GroupDLQ), driver.DeadLetterTopic(GroupForward),
	}
}

// Groups returns the consumer groups a backend must provide.
func Groups() []Group {
	return []Group{
		{Name: GroupBatch}, {Name: GroupAck}, {Name: GroupRedeliver}, {Name: GroupNack},
		{Name: GroupDLQ, MaxDeliveryAttempts: DLQMaxAttempts},
		{Name: GroupForward}, {Name: GroupFilter}, {Name: GroupBad}, {Name: GroupDLQReader},
	}
}

// Run runs every case against b. Cases that wait on invisible times run in
// parallel with each other.
func Run(t *testing.T, b Backend) {
	require.NoError(t, b.validate(), "backend %s", b.Name)
	if b.Logger == nil {
		b.Logger = zap.NewNop()
	}
	s := &suite{b: b}
	t.Run("Route", s.testRoute)
	t.Run("SendSingle", s.testSendSingle)
	t.Run("BadInputs", s.testBadInputs)
	t.Run("Consume", func(t *testing.T) {
		t.Run("SendBatch", s.testSendBatch)
		t.Run("ReceiveAck", s.testReceiveAck)
		t.Run("Redelivery", s.testRedelivery)
		t.Run("Nack", s.testNack)
		t.Run("DeadLetterAfterMaxAttempts", s.testDeadLetterAfterMaxAttempts)
		t.Run("ForwardToDeadLetterQueue", s.testForwardToDeadLetterQueue)
		t.Run("TagFilter", s.testTagFilter)
	})
}

type suite struct {
	b Backend
}

// requestTimeout is generous: the suite runs on loaded CI machines, next to
// a JVM peer, and asserts outcomes, not latencies.
const requestTimeout = 10 * time.Second

// ctx returns a context for one case, bounded by d, cancelled at cleanup.
func (s *suite) ctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) newClient(t *testing.T, cfg driver.Config) *driver.Client {
	t.Helper()
	cfg.RequestTimeout = requestTimeout
	cfg.Logger = s.b.Logger.With(zap.String("backend", s.b.Name), zap.String("case", t.Name()))
	c, err := driver.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// producer returns a producer client publishing to topics.
func (s *suite) producer(t *testing.T, topics ...string) *driver.Client {
	return s.newClient(t, driver.Config{Type: driver.Producer, Topics: topics})
}

// consumer returns a simple consumer of group subscribed to topics with
// filter.
func (s *suite) consumer(t *testing.T, group string, filter driver.Filter, topics ...string) *driver.Client {
	subs := make([]driver.Subscription, len(topics))
	for i, tp := range topics {
		subs[i] = driver.Subscription{Topic: tp, Filter: filter}
	}
	return s.newClient(t, driver.Config{Type: driver.SimpleConsumer, Group: group, Subscriptions: subs})
}

// route returns topic's route through the backend's access point, failing
// with a hint when the backend lacks the topic.
func (s *suite) route(ctx context.Context, t *testing.T, c *driver.Client, topic string) *driver.Route {
	t.Helper()
	r, err := c.Route(ctx, s.b.Endpoint, topic)
	require.NoError(t, err, "backend %s must provide topic %s (see wiresuite.Topics)", s.b.Name, topic)
	require.NotEmpty(t, r.WritableQueues(), "topic %s has no writable master queue", topic)
	require.NotEmpty(t, r.ReadableQueues(), "topic %s has no readable master queue", topic)
	return r
}

// code returns the protocol status code carried by a driver error, or
// CODE_UNSPECIFIED.
func code(err error) rmqpb.Code {
	var de *driver.Error
	if errors.As(err, &de) {
		return de.Code
	}
	return rmqpb.Code_CODE_UNSPECIFIED
}

// requireCode fails unless err is a driver error with status code want.
func requireCode(t *testing.T, want rmqpb.Code, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s must fail with %s", what, want)
	require.Equal(t, want.String(), code(err).String(), "%s: %v", what, err)
}
