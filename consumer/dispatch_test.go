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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

func TestHandlerPanicCountsAsFailure(t *testing.T) {
	f := newFakeBroker()
	reg := prometheus.NewRegistry()
	var calls atomic.Int32
	newFakeConsumer(t, f, func(ctx context.Context, m *Message) error {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return nil
	}, WithConfig(fakeDoc(config.Consumer{MaxAttempts: 5})), WithRegisterer(reg))

	f.push(msg("p1"))
	f.waitSettled(t, 1)
	f.mu.Lock()
	assert.Equal(t, []time.Duration{10 * time.Millisecond}, f.nacks["p1"], "a panic nacks with the backoff")
	assert.Empty(t, f.acks)
	f.mu.Unlock()
	assert.Equal(t, 1.0, testutil.ToFloat64(counterWith(t, reg, "twinmq_consumer_handled_total", "result", "panic")))

	// The redelivery (attempt 2) succeeds and is acked: the consumer kept
	// working after the panic.
	m := msg("p1")
	m.DeliveryAttempt = 2
	f.push(m)
	f.waitSettled(t, 2)
	f.mu.Lock()
	assert.Equal(t, []string{"p1"}, f.acks)
	f.mu.Unlock()
}

func TestUndecodableGoesToDeadLetter(t *testing.T) {
	f := newFakeBroker()
	var calls atomic.Int32
	newFakeConsumer(t, f, func(ctx context.Context, m *Message) error {
		calls.Add(1)
		return nil
	}, WithConfig(fakeDoc(config.Consumer{})))
	bad := msg("bad")
	bad.Err = fmt.Errorf("message bad: %w: digest mismatch", driver.ErrCorrupted)
	f.push(bad, msg("good"))
	f.waitSettled(t, 2)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, []string{"bad"}, f.dlq)
	assert.Equal(t, []string{"good"}, f.acks, "the bad message does not block the good one")
	assert.Equal(t, int32(1), calls.Load(), "the handler never sees an undecodable message")
}

func TestMaxAttemptsFromConfig(t *testing.T) {
	f := newFakeBroker()
	newFakeConsumer(t, f, func(ctx context.Context, m *Message) error { return errors.New("no") },
		WithConfig(fakeDoc(config.Consumer{MaxAttempts: 2})))
	m1 := msg("m1") // attempt 1 of 2: nack
	m2 := msg("m2")
	m2.DeliveryAttempt = 2 // last attempt: dead letter
	f.push(m1, m2)
	f.waitSettled(t, 2)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Len(t, f.nacks["m1"], 1)
	assert.Equal(t, []string{"m2"}, f.dlq)
}

// TestInvisibleTimeExtended: a handler slower than the invisible time has
// its message's invisible time extended meanwhile, and the ack uses the
// newest receipt handle (the fake refuses stale ones).
func TestInvisibleTimeExtended(t *testing.T) {
	f := newFakeBroker()
	newFakeConsumer(t, f, func(ctx context.Context, m *Message) error {
		time.Sleep(testInvisible + testInvisible/2)
		return nil
	}, WithConfig(fakeDoc(config.Consumer{})))
	f.push(msg("slow"))
	f.waitSettled(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.GreaterOrEqual(t, f.renews["slow"], 1)
	assert.Equal(t, []string{"slow"}, f.acks)
}

// TestConcurrencyLimitAndLiveChange: never more handlers run at once than
// the configured concurrency, and a new document changes it live.
func TestConcurrencyLimitAndLiveChange(t *testing.T) {
	f := newFakeBroker()
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: fakeDoc(config.Consumer{Concurrency: 2}), Revision: "1"}
	var (
		running, peak atomic.Int32
		release       = make(chan struct{})
	)
	h := func(ctx context.Context, m *Message) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		return nil
	}
	c := newFakeConsumer(t, f, h, WithSource(config.Chan(versions)))
	var batch []*driver.ReceivedMessage
	for i := 0; i < 8; i++ {
		batch = append(batch, msg(fmt.Sprintf("c%d", i)))
	}
	f.push(batch...)
	require.Eventually(t, func() bool { return running.Load() == 2 }, waitLong, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int32(2), peak.Load())

	versions <- config.Version{Config: fakeDoc(config.Consumer{Concurrency: 5}), Revision: "2"}
	require.Eventually(t, func() bool { return c.live.Load().concurrency == 5 }, waitLong, time.Millisecond)
	require.Eventually(t, func() bool { return running.Load() == 5 }, waitLong, time.Millisecond)
	close(release)
	f.waitSettled(t, 8)
	assert.Equal(t, int32(5), peak.Load())
}

// TestOrderedGroupKeepsOrder: in an ordered group the messages of one
// message group run one at a time in order; a failure is retried in place
// (the next message waits), other groups proceed meanwhile.
func TestOrderedGroupKeepsOrder(t *testing.T) {
	f := newFakeBroker()
	f.settings.FIFO = true
	var (
		mu    sync.Mutex
		order = map[string][]string{}
		fails = map[string]int{}
	)
	h := func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		order[m.MessageGroup] = append(order[m.MessageGroup], fmt.Sprintf("%s#%d", m.ID, m.DeliveryAttempt))
		if m.ID == "a2" && fails["a2"] < 2 {
			fails["a2"]++
			return errors.New("retry me")
		}
		return nil
	}
	newFakeConsumer(t, f, h, WithConfig(fakeDoc(config.Consumer{MaxAttempts: 5})))
	var batch []*driver.ReceivedMessage
	for i := 1; i <= 4; i++ {
		for _, g := range []string{"a", "b"} {
			m := msg(fmt.Sprintf("%s%d", g, i))
			m.Group = g
			batch = append(batch, m)
		}
	}
	f.push(batch...)
	f.waitSettled(t, 8)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"a1#1", "a2#1", "a2#2", "a2#3", "a3#1", "a4#1"}, order["a"])
	assert.Equal(t, []string{"b1#1", "b2#1", "b3#1", "b4#1"}, order["b"])
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Len(t, f.acks, 8)
	assert.Empty(t, f.nacks, "ordered failures are retried in place, not nacked")
}

// TestCloseFinishesInFlight: Close waits for the running handler and acks
// its message; a message received but not yet started is handled too.
func TestCloseFinishesInFlight(t *testing.T) {
	f := newFakeBroker()
	started := make(chan struct{}, 2)
	h := func(ctx context.Context, m *Message) error {
		started <- struct{}{}
		time.Sleep(200 * time.Millisecond)
		return nil
	}
	c := newFakeConsumer(t, f, h, WithConfig(fakeDoc(config.Consumer{Concurrency: 1})))
	f.push(msg("x1"), msg("x2"))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Close(ctx))
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.ElementsMatch(t, []string{"x1", "x2"}, f.acks)
}

// TestCloseBoundedByContext: a handler that ignores everything cannot hold
// Close past its ctx; its message is left for redelivery.
func TestCloseBoundedByContext(t *testing.T) {
	f := newFakeBroker()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	started := make(chan struct{})
	h := func(ctx context.Context, m *Message) error {
		close(started)
		select {
		case <-block:
		case <-ctx.Done():
		}
		return ctx.Err()
	}
	c := newFakeConsumer(t, f, h, WithConfig(fakeDoc(config.Consumer{})))
	f.push(msg("stuck"))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := c.Close(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Empty(t, f.acks)
}

func TestNewRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	h := func(context.Context, *Message) error { return nil }
	cfg := fakeDoc(config.Consumer{})
	cases := map[string]struct {
		group, topic string
		h            Handler
		opts         []Option
		want         error
	}{
		"no config":        {"g", "t", h, nil, ErrInvalidConfig},
		"nil handler":      {"g", "t", nil, []Option{WithConfig(cfg)}, ErrInvalidConfig},
		"bad group":        {"g roup", "t", h, []Option{WithConfig(cfg)}, ErrInvalidConfig},
		"unknown topic":    {"g", "nope", h, []Option{WithConfig(cfg)}, ErrUnknownTopic},
		"bad lane":         {"g", "t", h, []Option{WithConfig(cfg), WithLane("A..b")}, ErrInvalidConfig},
		"registry no auth": {"g", "t", h, []Option{WithConfig(cfg), WithLaneRegistry(lane.NewMemoryRegistry(lane.MemoryOptions{}))}, ErrInvalidConfig},
		"batch too large":  {"g", "t", h, []Option{WithConfig(cfg), WithBatchSize(64)}, ErrInvalidConfig},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := New(ctx, tc.group, tc.topic, tc.h, tc.opts...)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// counterWith finds one series of a counter vector in reg.
func counterWith(t *testing.T, reg *prometheus.Registry, name, label, value string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return nil
}
