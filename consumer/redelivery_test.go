package consumer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
)

// TestRedeliveryAndDeadLetter: a handler that fails twice and then
// succeeds sees its message three times (attempts 1, 2, 3) and it is acked;
// a handler that always fails sees its message the maximum number of times
// (3 here), after which it is in the group's dead-letter topic and never
// delivered again.
func TestRedeliveryAndDeadLetter(t *testing.T) {
	const topic, group = "retry_orders", "retry_group"
	// The broker's own limit is higher, so the dead letter is the
	// consumer's doing, driven by the live maxAttempts of the document.
	env := startEnv(t, topic, embedded.Group{Name: group, MaxDeliveryAttempts: 10})
	cfg := docFor(env, topic, group, config.Consumer{MaxAttempts: 3})
	s := newSender(t, env, topic)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(body string) string {
		res, err := s.client.Send(ctx, env.Clusters()[0].Endpoints()[0],
			[]*driver.Message{{Topic: topic, Body: []byte(body), QueueID: driver.AnyQueue}})
		require.NoError(t, err)
		return res[0].MessageID
	}

	var (
		mu       sync.Mutex
		attempts = map[string][]int{}
		okAt     = map[string]int{}
	)
	h := func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[string(m.Body)] = append(attempts[string(m.Body)], m.DeliveryAttempt)
		switch string(m.Body) {
		case "flaky":
			if len(attempts["flaky"]) <= 2 {
				return errors.New("flaky failure")
			}
			okAt["flaky"] = m.DeliveryAttempt
			return nil
		case "poison":
			return errors.New("poison never works")
		}
		return nil
	}
	c := newConsumer(t, group, topic, h, WithConfig(cfg),
		WithRetryBackoff(func(int) time.Duration { return 100 * time.Millisecond }))

	flaky := send("flaky")
	poison := send("poison")

	var dlq []*driver.ReceivedMessage
	deadline := time.Now().Add(waitLong)
	for {
		mu.Lock()
		done := okAt["flaky"] != 0 && len(attempts["poison"]) >= 3
		mu.Unlock()
		if done {
			waitIdle(t, c)
			dlq = drainTopic(t, env, embedded.DLQTopic(group), "retry_dlq_reader")
			if len(dlq) > 0 {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "redeliveries did not complete: %v", attempts)
		time.Sleep(50 * time.Millisecond)
	}
	// Give a wrongly re-queued poison message the time to come back.
	time.Sleep(time.Second)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{1, 2, 3}, attempts["flaky"], "flaky message %s", flaky)
	assert.Equal(t, 3, okAt["flaky"])
	assert.Equal(t, []int{1, 2, 3}, attempts["poison"], "poison message %s is not delivered after its last attempt", poison)
	require.Len(t, dlq, 1)
	got := dlq[0]
	assert.Equal(t, "poison", string(got.Body))
	ids := []string{got.ID}
	if got.DeadLetter != nil {
		ids = append(ids, got.DeadLetter.MessageID)
	}
	assert.Contains(t, ids, poison)
}
