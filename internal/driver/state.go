package driver

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// EndpointState is what a Client knows of its link to one endpoint.
type EndpointState struct {
	// Dialled: the client has used the endpoint (it dials lazily).
	Dialled bool
	// Connected: the endpoint's current Telemetry stream completed its
	// Settings handshake, so calls there are served as this client.
	Connected bool
	// Err is why the latest Telemetry attempt failed (a refused handshake,
	// an unreachable endpoint); nil once an attempt succeeded after it.
	Err error
}

// EndpointState reports the client's link to addr.
func (c *Client) EndpointState(addr string) EndpointState {
	c.mu.RLock()
	ep := c.endpoints[addr]
	c.mu.RUnlock()
	if ep == nil {
		return EndpointState{}
	}
	t := ep.tel
	t.mu.Lock()
	err := t.lastErr
	t.mu.Unlock()
	return EndpointState{Dialled: true, Connected: t.up.Load(), Err: err}
}

// withStatusCode recovers the protocol status code of a Telemetry stream
// the server ended with a gRPC status whose message starts with the code's
// name ("CONSUMER_GROUP_NOT_FOUND: consumer group g not found", as the
// embedded broker words a refused Settings): the code then tells the
// caller which refusal it was, and the error's class follows the code.
// Any other error is returned as it is.
func withStatusCode(err error) error {
	var de *Error
	if !errors.As(err, &de) || de.Code != rmqpb.Code_CODE_UNSPECIFIED || de.GRPCCode == codes.OK {
		return err
	}
	name, rest, ok := strings.Cut(de.Message, ": ")
	if !ok {
		name, rest = de.Message, ""
	}
	n, known := rmqpb.Code_value[name]
	code := rmqpb.Code(n)
	if !known || codeClass(code) == nil {
		return err
	}
	out := *de
	out.Code, out.Message, out.class = code, rest, codeClass(code)
	return &out
}

// verifyTimeout bounds one verification (the consumer's handler run).
const verifyTimeout = time.Minute

// verifyMessage answers a VerifyMessageCommand as RocketMQ's Java push
// consumer does: the message goes through the consumer's handler
// (Config.OnVerifyMessage) off the stream's goroutine, and the answer is a
// VerifyMessageResult with the command's nonce and a status the proxy
// turns into the operator's result: OK (consumed), FAILED_TO_CONSUME_MESSAGE
// (the handler failed; "consume later"), MESSAGE_CORRUPTED (the message
// could not be decoded). A client without OnVerifyMessage (a producer)
// answers NOT_IMPLEMENTED, as the official clients other than the push
// consumer do. While eight verifications of the client are running, the
// next ones are answered TOO_MANY_REQUESTS.
func (t *telemetry) verifyMessage(ctx context.Context, cmd *rmqpb.VerifyMessageCommand) {
	c := t.c
	nonce := cmd.GetNonce()
	answer := func(code rmqpb.Code, msg string) {
		t.reply(&rmqpb.TelemetryCommand{
			Status:  &rmqpb.Status{Code: code, Message: msg},
			Command: &rmqpb.TelemetryCommand_VerifyMessageResult{VerifyMessageResult: &rmqpb.VerifyMessageResult{Nonce: nonce}},
		})
	}
	fn := c.cfg.OnVerifyMessage
	if fn == nil {
		answer(rmqpb.Code_NOT_IMPLEMENTED, "this client does not consume")
		return
	}
	msg := convertMessage(cmd.GetMessage(), t.ep.addr)
	if msg.Err != nil {
		answer(rmqpb.Code_MESSAGE_CORRUPTED, msg.Err.Error())
		return
	}
	select {
	case c.verifying <- struct{}{}:
	default:
		c.log.Warn("message verification refused: too many in flight", zap.String("endpoint", t.ep.addr),
			zap.String("message_id", msg.ID))
		answer(rmqpb.Code_TOO_MANY_REQUESTS, "too many verifications in flight")
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { <-c.verifying }()
		vctx, cancel := context.WithTimeout(ctx, verifyTimeout)
		defer cancel()
		if err := fn(vctx, t.ep.addr, msg); err != nil {
			c.log.Info("message verification: the consumer failed the message", zap.String("endpoint", t.ep.addr),
				zap.String("message_id", msg.ID), zap.Error(err))
			answer(rmqpb.Code_FAILED_TO_CONSUME_MESSAGE, err.Error())
			return
		}
		answer(rmqpb.Code_OK, "OK")
	}()
}
