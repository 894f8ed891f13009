//go:build interop

package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/consumer"
	"github.com/twinmq/twinmq/producer"
)

// Topic and group of the consumer test, created by interop/run.sh.
const (
	sdkConsumeTopic = "interop_consume"
	sdkConsumeGroup = "interop_consume_group"
)

// sdkDelivery is one handler call as the test saw it.
type sdkDelivery struct {
	attempt int
	body    []byte
	at      time.Time
}

// TestInteropConsumer runs the SDK consumer against the real broker: it
// receives what the SDK producer sent, acks it, and sees again only the
// message whose handler failed once, after the nack's backoff, with its
// delivery attempt counted up by the broker. The consumer keeps running
// past the invisible time of everything it acked (the proxy's 10 s
// minimum) so that an ack the broker did not take would show as a
// redelivery.
func TestInteropConsumer(t *testing.T) {
	endpoint := endpointFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cfg := sdkConfig(endpoint, sdkConsumeTopic, true, sdkCluster{name: "rmq", physical: sdkConsumeTopic, weight: 100})
	const n = 300
	failBody := sdkBody("consume", 7)

	var mu sync.Mutex
	seen := map[string][]sdkDelivery{}
	failed := false
	handler := func(_ context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.ID] = append(seen[m.ID], sdkDelivery{attempt: m.DeliveryAttempt, body: bytes.Clone(m.Body), at: time.Now()})
		if bytes.Equal(m.Body, failBody) && !failed {
			failed = true
			return errors.New("the test's handler fails this message once")
		}
		return nil
	}
	// The nack backoff is set to 1 s so that the redelivery does not wait
	// for the group's server-side policy; the invisible time is the
	// proxy's minimum.
	const invisible = 10 * time.Second
	c, err := consumer.New(ctx, sdkConsumeGroup, sdkConsumeTopic, handler,
		consumer.WithConfig(cfg),
		consumer.WithInvisibleDuration(invisible),
		consumer.WithRetryBackoff(func(int) time.Duration { return time.Second }))
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			_ = c.Close(cctx)
		}
	})

	p := sdkProducer(t, producer.WithConfig(cfg))
	msgs := make([]*producer.Message, n)
	for i := range msgs {
		msgs[i] = &producer.Message{Topic: sdkConsumeTopic, Body: sdkBody("consume", i), Tag: "consume"}
	}
	results, err := p.SendBatch(ctx, msgs)
	require.NoError(t, err)
	bodies := map[string][]byte{}
	failID := ""
	for i, r := range results {
		bodies[r.MessageID] = msgs[i].Body
		if i == 7 {
			failID = r.MessageID
		}
	}

	// Wait for every message, and for the failed one to come back.
	var allAt time.Time
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range bodies {
			if len(seen[id]) == 0 {
				return false
			}
		}
		if allAt.IsZero() {
			allAt = time.Now()
		}
		return len(seen[failID]) >= 2
	}, 90*time.Second, 50*time.Millisecond, "not every message was delivered, or the failed one did not come back")

	// Keep consuming until the invisible time of the last first delivery
	// is well past: an ack the broker lost would bring its message back.
	mu.Lock()
	last := allAt
	for _, ds := range seen {
		if ds[0].at.After(last) {
			last = ds[0].at
		}
	}
	mu.Unlock()
	window := time.Until(last.Add(invisible + 5*time.Second))
	t.Logf("all %d delivered; watching for %v more for redeliveries", n, window.Round(time.Millisecond))
	time.Sleep(window)

	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	closed = true
	require.NoError(t, c.Close(cctx))

	mu.Lock()
	defer mu.Unlock()
	for id, body := range bodies {
		ds := seen[id]
		for _, d := range ds {
			require.Equal(t, body, d.body, "body of %s", id)
		}
		if id == failID {
			require.Len(t, ds, 2, "the failed message: one failed delivery and one acked redelivery, got %s", sdkAttempts(ds))
			require.Equal(t, 1, ds[0].attempt)
			require.Equal(t, 2, ds[1].attempt, "the broker counts the redelivery as attempt 2")
			require.GreaterOrEqual(t, ds[1].at.Sub(ds[0].at), time.Second, "redelivered before the nack's backoff")
			t.Logf("redelivery of the failed message after %v", ds[1].at.Sub(ds[0].at).Round(time.Millisecond))
			continue
		}
		require.Len(t, ds, 1, "message %s was acked and came back: %s", id, sdkAttempts(ds))
		require.Equal(t, 1, ds[0].attempt)
	}
	for id := range seen {
		_, ok := bodies[id]
		require.True(t, ok, "delivered a message this test did not send: %s", id)
	}
}

func sdkAttempts(ds []sdkDelivery) string {
	s := ""
	for _, d := range ds {
		s += fmt.Sprintf("[attempt %d at %s] ", d.attempt, d.at.Format("15:04:05.000"))
	}
	return s
}
