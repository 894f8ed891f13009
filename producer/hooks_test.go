package producer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// recHook stamps every send and records what it saw.
type recHook struct {
	name string
	mu   *sync.Mutex // shared by the hooks of a test, as log is
	log  *[]string
	ends map[string]error // by message id
}

func (h *recHook) OnSend(_ context.Context, s *Send) func(*SendResult, error) {
	s.TraceContext = testTraceparent
	_ = s.SetProperty("tracestate", "vendor=1")
	err := s.SetProperty("KEYS", "x")
	h.mu.Lock()
	*h.log = append(*h.log, h.name+" start")
	h.mu.Unlock()
	id := s.MessageID
	return func(r *SendResult, sendErr error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		*h.log = append(*h.log, h.name+" end")
		if _, twice := h.ends[id]; twice {
			panic("done called twice for " + id)
		}
		if r != nil && r.MessageID != id {
			sendErr = fmt.Errorf("result of %s for the send of %s", r.MessageID, id)
		}
		if err == nil {
			sendErr = fmt.Errorf("a reserved key was accepted")
		}
		h.ends[id] = sendErr
	}
}

// TestSendHooks: every kind of send starts the hooks in order and ends
// them in reverse, once, with its outcome; what a hook stamps is stored
// with the message (the trace context in RocketMQ's own property) and the
// caller's Message is left as it was.
func TestSendHooks(t *testing.T) {
	env := startEnv(t, "orders")
	var (
		mu  sync.Mutex
		log []string
	)
	h1 := &recHook{name: "h1", mu: &mu, log: &log, ends: map[string]error{}}
	h2 := &recHook{name: "h2", mu: &mu, log: &log, ends: map[string]error{}}
	p := newProducer(t, WithConfig(docFor(env, "orders")), WithHooks(h1, "not a hook", h2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	m := &Message{Topic: "orders", Body: []byte("one")}
	r, err := p.Send(ctx, m)
	require.NoError(t, err)
	mu.Lock()
	assert.Equal(t, []string{"h1 start", "h2 start", "h2 end", "h1 end"}, log)
	mu.Unlock()
	assert.Nil(t, m.Properties, "the caller's message is not changed")

	done := make(chan *SendResult, 1)
	p.SendAsync(ctx, &Message{Topic: "orders", Body: []byte("two")}, func(r *SendResult, err error) {
		assert.NoError(t, err)
		done <- r
	})
	ra := <-done
	rb, err := p.SendBatch(ctx, []*Message{{Topic: "orders", Body: []byte("three")}, {Topic: "orders", Body: []byte("four")}})
	require.NoError(t, err)
	tx, err := p.SendTransactional(ctx, &Message{Topic: "orders", Body: []byte("five")})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	ids := []string{r.MessageID, ra.MessageID, rb[0].MessageID, rb[1].MessageID, tx.Result.MessageID}
	stored := drain(t, env, "orders")
	for _, h := range []*recHook{h1, h2} {
		h.mu.Lock()
		assert.Len(t, h.ends, len(ids))
		for _, id := range ids {
			e, ok := h.ends[id]
			assert.True(t, ok, "%s ended the send of %s", h.name, id)
			assert.NoError(t, e)
		}
		h.mu.Unlock()
	}
	for _, id := range ids {
		sm := stored[id]
		if assert.NotNil(t, sm, "message %s stored", id) {
			assert.Equal(t, testTraceparent, sm.TraceContext, "trace context of %s", id)
			assert.Equal(t, "vendor=1", sm.Properties["tracestate"])
			assert.NotContains(t, sm.Properties, "traceparent", "the trace context is not a user property")
		}
	}
}

// TestSendHookFailure: a send that fails ends the hooks with its error.
func TestSendHookFailure(t *testing.T) {
	var log []string
	h := &recHook{name: "h", mu: new(sync.Mutex), log: &log, ends: map[string]error{}}
	p := newProducer(t, WithConfig(noRouteConfig()), WithHooks(h))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, sendErr := p.Send(ctx, &Message{Topic: "nowhere", Body: []byte("x")})
	require.Error(t, sendErr)
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.ends, 1)
	for _, err := range h.ends {
		assert.Equal(t, sendErr, err, "the hook gets the error the caller gets")
	}
}
