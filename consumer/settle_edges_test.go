package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
)

// A group reading its own dead-letter topic (the replay a DLQ exists for)
// with a handler that keeps failing: each failure waits its retry backoff,
// and the topic does not grow by itself. The consumer's dead-letter call
// (ForwardMessageToDeadLetterQueue) used to append a copy to that very
// topic, which was delivered again at once: a spin.
func TestOwnDeadLetterReplayWaitsItsBackoff(t *testing.T) {
	const topic, group = "rv_orders", "rv_dlq_g"
	env := startEnv(t, topic, embedded.Group{Name: group})
	s := newSender(t, env, topic)
	s.send(0, 1, "")

	// 1. A consumer whose only attempt fails dead-letters the message.
	cfg := docFor(env, topic, group, config.Consumer{MaxAttempts: 1})
	first := newConsumer(t, group, topic, func(context.Context, *Message) error { return errors.New("fail") },
		WithConfig(cfg))
	require.Eventually(t, func() bool {
		return len(drainTopic(t, env, embedded.DLQTopic(group), "rv_peek")) == 1
	}, waitLong, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	require.NoError(t, first.Close(ctx))
	cancel()

	// 2. The same group replays its dead-letter topic; the handler still
	// fails, with a retry backoff of 1 s.
	const logic = "rv_replay"
	cfg2 := docFor(env, logic, group, config.Consumer{MaxAttempts: 1})
	cfg2.Topics = map[string]config.Topic{logic: env.TopicConfig(embedded.DLQTopic(group))}
	var calls atomic.Int64
	replay := newConsumer(t, group, logic, func(context.Context, *Message) error {
		calls.Add(1)
		return errors.New("still failing")
	}, WithConfig(cfg2), WithRetryBackoff(func(int) time.Duration { return time.Second }), WithRegisterer(prometheus.NewRegistry()))
	require.Eventually(t, func() bool { return calls.Load() > 0 }, waitLong, 10*time.Millisecond)
	start := calls.Load()
	time.Sleep(2 * time.Second)
	n := calls.Load() - start
	copies := testutil.ToFloat64(replay.met.deadLetters.WithLabelValues(dlqMaxAttempts))
	require.LessOrEqual(t, n, int64(4), "handler ran %d times in 2 s with a 1 s retry backoff; %v copies dead-lettered into the topic being read", n, copies)
}

// refusingBroker refuses every receive, as a broker does for settings
// below its floors.
type refusingBroker struct {
	*fakeBroker
	receives atomic.Int64
}

func (f *refusingBroker) Receive(ctx context.Context, req driver.ReceiveRequest) ([]*driver.ReceivedMessage, error) {
	f.receives.Add(1)
	return nil, fmt.Errorf("rocketmq ReceiveMessage to %s: ILLEGAL_POLLING_TIME (40016): %w", fakeEndpoint, driver.ErrBadRequest)
}

// A consumer whose receives the broker refuses logs the refusal at Error
// once per broker, not once per receive loop.
func TestLastingRefusalLoggedOncePerBroker(t *testing.T) {
	f := &refusingBroker{fakeBroker: newFakeBroker()}
	core, logs := observer.New(zap.ErrorLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, "g", "t", func(context.Context, *Message) error { return nil },
		WithConfig(fakeDoc(config.Consumer{})), WithLogger(zap.New(core)), WithInvisibleDuration(testInvisible),
		func(o *options) { o.newClient = func(driver.Config) (brokerClient, error) { return f, nil } })
	require.NoError(t, err)
	defer func() { _ = c.Close(ctx) }()
	require.Eventually(t, func() bool { return f.receives.Load() >= 12 }, waitLong, 10*time.Millisecond)
	n := logs.FilterMessage("the broker refuses to deliver to this consumer; check its settings").Len()
	require.Equal(t, 1, n, "one broker, one lasting refusal, %d receives: logged at Error %d times", f.receives.Load(), n)
}

// An ordered retry gives the handler a new Message, so that the one the
// failed run kept is that run's alone: what the failed run's goroutine
// does with it must not reach the retry (with a shallow copy the race
// detector reported the two handlers' accesses to Properties).
func TestOrderedRetryGetsAPristineMessage(t *testing.T) {
	f := newFakeBroker()
	f.settings.FIFO = true
	var (
		runs   atomic.Int32
		writes sync.WaitGroup
		second = make(chan string, 1)
	)
	writes.Add(1)
	newFakeConsumer(t, f, func(ctx context.Context, m *Message) error {
		if runs.Add(1) == 1 {
			go func() { // keeps its message and annotates it
				defer writes.Done()
				m.Properties["annotated-by-run"] = "1"
			}()
			return errors.New("retry me")
		}
		second <- m.Properties["annotated-by-run"]
		return nil
	}, WithConfig(fakeDoc(config.Consumer{MaxAttempts: 5})), WithRetryBackoff(func(int) time.Duration { return 200 * time.Millisecond }))
	m := msg("o1")
	m.Group = "g1"
	m.Properties = map[string]string{"k": "v"}
	f.push(m)
	f.waitSettled(t, 1)
	writes.Wait()
	require.Equal(t, "", <-second, "the retry's Message carries what the failed run wrote to the one it kept")
}
