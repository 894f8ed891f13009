package driver

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// ReceiveRequest asks one queue's server for messages.
type ReceiveRequest struct {
	// Queue is the queue to receive from, as returned by Route or
	// QueryAssignment; its Endpoint is where the call goes. A real proxy
	// uses only the broker name (it pops from every queue of that broker).
	Queue Queue
	// Filter selects messages; the zero value takes all ("*" tags).
	Filter Filter
	// BatchSize is the maximum number of messages (the proxy caps it at
	// 32). Zero means the server-pushed receive batch size, else 32.
	BatchSize int
	// InvisibleDuration hides the received messages from other receives
	// until acked or changed. Required unless AutoRenew.
	InvisibleDuration time.Duration
	// AutoRenew lets the server extend invisibility while the client lives
	// (push consumers).
	AutoRenew bool
	// LongPollingTimeout is how long the server may wait for messages.
	// Zero means the server-pushed value, else Config.LongPollingTimeout.
	LongPollingTimeout time.Duration
	// AttemptID makes a re-poll after a lost answer idempotent; reuse it
	// after an empty or failed receive, replace it after messages came.
	AttemptID string
}

// Receive long-polls one queue. The call's deadline is the long polling
// time plus the request timeout; when the caller's deadline is earlier,
// the long polling time announced to the server is shortened to fit. An
// empty result (MESSAGE_NOT_FOUND) is not an error. Messages that failed
// their digest check are returned with Err set.
func (c *Client) Receive(ctx context.Context, req ReceiveRequest) ([]*ReceivedMessage, error) {
	const rpc = "ReceiveMessage"
	addr := req.Queue.Endpoint
	if !c.cfg.Type.consumer() {
		return nil, clientError(ErrBadRequest, rpc, addr, "only consumers receive")
	}
	if req.Queue.Topic == "" {
		return nil, clientError(ErrBadRequest, rpc, addr, "queue has no topic")
	}
	if !req.AutoRenew && req.InvisibleDuration <= 0 {
		return nil, clientError(ErrBadRequest, rpc, addr, "InvisibleDuration is required without AutoRenew")
	}
	if req.BatchSize < 0 {
		return nil, clientError(ErrBadRequest, rpc, addr, "BatchSize is negative")
	}
	ep, err := c.prepare(ctx, addr, rpc)
	if err != nil {
		return nil, err
	}
	var srv ServerSettings
	if s := ep.tel.settings.Load(); s != nil {
		srv = *s
	}
	batch := req.BatchSize
	if batch == 0 {
		batch = srv.ReceiveBatchSize
	}
	if batch <= 0 {
		batch = 32
	}
	poll := req.LongPollingTimeout
	if poll <= 0 {
		poll = srv.LongPollingTimeout
	}
	if poll <= 0 {
		poll = c.cfg.LongPollingTimeout
	}
	// Leave the server time to answer within the caller's deadline: a
	// server that polls until the very deadline pops messages the client
	// then never sees (they stay invisible until their invisible time).
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < poll+c.cfg.RequestTimeout {
			poll = max(left-c.cfg.RequestTimeout, left/2)
		}
	}
	pbreq := &rmqpb.ReceiveMessageRequest{
		Group:              c.groupResource(),
		MessageQueue:       req.Queue.pb(c),
		FilterExpression:   req.Filter.pb(),
		BatchSize:          int32(batch),
		AutoRenew:          req.AutoRenew,
		LongPollingTimeout: durationpb.New(poll),
	}
	if req.InvisibleDuration > 0 {
		pbreq.InvisibleDuration = durationpb.New(req.InvisibleDuration)
	}
	if req.AttemptID != "" {
		pbreq.AttemptId = &req.AttemptID
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, poll+c.cfg.RequestTimeout)
	defer cancel()
	stream, err := ep.stub.ReceiveMessage(cctx, pbreq)
	if err != nil {
		err = transportError(ctx, err, rpc, ep.addr)
		c.met.observe(rpc, start, err)
		return nil, err
	}
	msgs, err := readReceive(stream, ep.addr)
	if err != nil {
		err = transportError(ctx, err, rpc, ep.addr)
	}
	c.met.observe(rpc, start, err)
	return msgs, err
}

// receiveStream is the part of the generated stream client readReceive
// needs; tests feed it canned frames.
type receiveStream interface {
	Recv() (*rmqpb.ReceiveMessageResponse, error)
}

// readReceive reads a ReceiveMessage stream to its end. The server sends a
// status, then the messages, then its delivery time. MESSAGE_NOT_FOUND is
// an empty result. A stream that ends without any status and without
// messages is a server failure.
func readReceive(stream receiveStream, endpoint string) ([]*ReceivedMessage, error) {
	const rpc = "ReceiveMessage"
	var (
		msgs      []*ReceivedMessage
		sawStatus bool
	)
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch x := resp.GetContent().(type) {
		case *rmqpb.ReceiveMessageResponse_Status:
			sawStatus = true
			if x.Status.GetCode() == rmqpb.Code_MESSAGE_NOT_FOUND {
				continue
			}
			if err := statusError(x.Status, rpc, endpoint); err != nil {
				return nil, err
			}
		case *rmqpb.ReceiveMessageResponse_Message:
			if x.Message == nil {
				continue
			}
			msgs = append(msgs, convertMessage(x.Message, endpoint))
		case *rmqpb.ReceiveMessageResponse_DeliveryTimestamp:
			// The server's clock at delivery; not needed by the client.
		}
	}
	if !sawStatus && len(msgs) == 0 {
		return nil, &Error{RPC: rpc, Endpoint: endpoint, Message: "stream ended without a status", class: ErrInternal}
	}
	return msgs, nil
}
