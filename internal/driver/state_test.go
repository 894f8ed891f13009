package driver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// A consumer answers a verification request as RocketMQ's push consumer
// does: the message goes through its handler and the status says how it
// went; a message that cannot be decoded never reaches the handler.
func TestVerifyMessageRunsTheConsumer(t *testing.T) {
	f := startFake(t, nil)
	seen := make(chan *ReceivedMessage, 3)
	cfg := consumerConfig()
	cfg.OnVerifyMessage = func(ctx context.Context, endpoint string, m *ReceivedMessage) error {
		assert.Equal(t, f.addr, endpoint)
		seen <- m
		if m.ID == "bad" {
			return errors.New("handler failed")
		}
		return nil
	}
	c := newTestClient(t, cfg)
	require.NoError(t, c.Connect(ctxT(t), f.addr))

	corrupt := wireMessage("broken", []byte("x"))
	corrupt.Body = []byte("y") // the digest no longer matches
	for nonce, m := range map[string]*rmqpb.Message{"n-ok": wireMessage("ok", []byte("x")), "n-bad": wireMessage("bad", []byte("x")), "n-corrupt": corrupt} {
		f.push(t, &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_VerifyMessageCommand{
			VerifyMessageCommand: &rmqpb.VerifyMessageCommand{Nonce: nonce, Message: m}}})
	}
	require.Eventually(t, func() bool { return f.count(func(f *fakeServer) int { return len(f.replies) }) == 3 }, liveness, 10*time.Millisecond)
	f.mu.Lock()
	got := map[string]rmqpb.Code{}
	for _, r := range f.replies {
		require.NotNil(t, r.GetVerifyMessageResult(), "unexpected reply %v", r)
		got[r.GetVerifyMessageResult().GetNonce()] = r.GetStatus().GetCode()
	}
	f.mu.Unlock()
	assert.Equal(t, map[string]rmqpb.Code{
		"n-ok": rmqpb.Code_OK, "n-bad": rmqpb.Code_FAILED_TO_CONSUME_MESSAGE, "n-corrupt": rmqpb.Code_MESSAGE_CORRUPTED,
	}, got)
	require.Len(t, seen, 2, "the undecodable message never reaches the handler")
	for range 2 {
		m := <-seen
		assert.Equal(t, []byte("x"), m.Body)
		assert.Equal(t, "a.x", m.Properties["lane"])
	}

	_, err := New(Config{Type: Producer, OnVerifyMessage: cfg.OnVerifyMessage})
	require.ErrorIs(t, err, ErrInvalidConfig, "a producer consumes nothing to verify")
}

// EndpointState tells an endpoint never used, one connected, and one whose
// server went away.
func TestEndpointState(t *testing.T) {
	f := startFake(t, nil)
	c := newTestClient(t, producerConfig())
	assert.Equal(t, EndpointState{}, c.EndpointState(f.addr))
	require.NoError(t, c.Connect(ctxT(t), f.addr))
	st := c.EndpointState(f.addr)
	assert.True(t, st.Dialled)
	assert.True(t, st.Connected)
	assert.NoError(t, st.Err)

	f.srv.Stop()
	require.Eventually(t, func() bool {
		st := c.EndpointState(f.addr)
		return !st.Connected && st.Err != nil
	}, liveness, 10*time.Millisecond)
}

// A Telemetry stream ended with a gRPC status whose message names a
// protocol code gives that code back.
func TestWithStatusCode(t *testing.T) {
	refused := withStatusCode(&Error{GRPCCode: codes.InvalidArgument, RPC: "Telemetry",
		Message: "CONSUMER_GROUP_NOT_FOUND: consumer group g not found", class: ErrBadRequest})
	var de *Error
	require.ErrorAs(t, refused, &de)
	assert.Equal(t, rmqpb.Code_CONSUMER_GROUP_NOT_FOUND, de.Code)
	assert.Equal(t, "consumer group g not found", de.Message)
	assert.ErrorIs(t, refused, ErrNotFound)
	assert.False(t, Retryable(refused))

	for _, keep := range []error{
		&Error{GRPCCode: codes.InvalidArgument, Message: "process client telemetryCommand failed. x", class: ErrBadRequest},
		&Error{GRPCCode: codes.Unavailable, Message: "OK: nothing", class: ErrUnavailable},
		&Error{Code: rmqpb.Code_UNAUTHORIZED, Message: "TOPIC_NOT_FOUND: y", class: ErrUnauthorized},
		errors.New("plain"),
	} {
		assert.Same(t, keep, withStatusCode(keep))
	}
}
