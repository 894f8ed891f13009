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
	"github.com/twinmq/twinmq/internal/pb/forwardpb"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

type hookKey struct{}

// recHooks records what the consumer told it.
type recHooks struct {
	mu       sync.Mutex
	receives []Receive
	traces   map[string]string // TraceContext of each handling, by id
	ends     map[string]error  // how each handling ended, by id
}

func (h *recHooks) OnReceive(_ context.Context, r *Receive) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := *r
	c.Messages = append([]*Message(nil), r.Messages...)
	h.receives = append(h.receives, c)
}

func (h *recHooks) OnHandle(ctx context.Context, x *Handling) (context.Context, func(error)) {
	h.mu.Lock()
	h.traces[x.Message.ID] = x.Message.TraceContext
	h.mu.Unlock()
	return context.WithValue(ctx, hookKey{}, x.Message.ID), func(err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.ends[x.Message.ID] = err
	}
}

// TestHooks: a receive is told with its messages and their trace context;
// each handler run gets the ctx the handle hook returned, and the hook
// hears how it ended.
func TestHooks(t *testing.T) {
	f := newFakeBroker()
	h := &recHooks{traces: map[string]string{}, ends: map[string]error{}}
	fails := errors.New("refused")
	handler := func(ctx context.Context, m *Message) error {
		if ctx.Value(hookKey{}) != m.ID {
			return errors.New("the handler did not get the hook's ctx")
		}
		if m.ID == "bad" {
			return fails
		}
		return nil
	}
	newFakeConsumer(t, f, handler, WithConfig(fakeDoc(config.Consumer{})), WithHooks(h, 42))
	good, bad := msg("good"), msg("bad")
	good.TraceContext = testTraceparent
	f.push(good, bad)
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.ends) == 2
	}, waitLong, 5*time.Millisecond)

	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.receives)
	r := h.receives[0]
	assert.Equal(t, "g", r.Group)
	assert.Equal(t, "t", r.Topic)
	assert.Equal(t, "fake", r.Cluster)
	assert.False(t, r.Start.IsZero())
	require.Len(t, r.Messages, 2)
	assert.Equal(t, testTraceparent, r.Messages[0].TraceContext)
	assert.Equal(t, map[string]string{"good": testTraceparent, "bad": ""}, h.traces)
	assert.NoError(t, h.ends["good"])
	assert.ErrorIs(t, h.ends["bad"], fails)
}

// TestForwardKeepsTraceContext: a forwarded message carries the trace
// context of the producer to the consumer of its lane.
func TestForwardKeepsTraceContext(t *testing.T) {
	m := &Message{ID: "m1", Topic: "t", Body: []byte("b"), TraceContext: testTraceparent}
	got := fromForwarded(&forwardpb.DeliverRequest{Message: toForwarded(m)})
	assert.Equal(t, testTraceparent, got.TraceContext)
	assert.True(t, got.Forwarded)
}
