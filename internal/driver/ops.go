package driver

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// AckEntry identifies one delivery to acknowledge.
type AckEntry struct {
	MessageID     string
	ReceiptHandle string
}

// Ack acknowledges deliveries of topic's messages received from endpoint,
// in one AckMessage call. The returned slice has one error per entry (nil =
// acked); the second result is set when the whole call failed, in which
// case every entry carries that error too.
func (c *Client) Ack(ctx context.Context, endpoint, topic string, entries []AckEntry) ([]error, error) {
	const rpc = "AckMessage"
	if err := c.consumerCall(rpc, endpoint, topic); err != nil {
		return fill(len(entries), err), err
	}
	if len(entries) == 0 {
		return nil, nil
	}
	for i, e := range entries {
		if e.ReceiptHandle == "" {
			err := clientError(ErrBadRequest, rpc, endpoint, "entry %d has no receipt handle", i)
			return fill(len(entries), err), err
		}
	}
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return fill(len(entries), err), err
	}
	req := &rmqpb.AckMessageRequest{Group: c.groupResource(), Topic: c.resource(topic),
		Entries: make([]*rmqpb.AckMessageEntry, len(entries))}
	for i, e := range entries {
		req.Entries[i] = &rmqpb.AckMessageEntry{MessageId: e.MessageID, ReceiptHandle: e.ReceiptHandle}
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	resp, err := ep.stub.AckMessage(cctx, req)
	cancel()
	if err = c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus()); err != nil {
		return fill(len(entries), err), err
	}
	return matchAckResults(entries, resp.GetEntries(), ep.addr), nil
}

// matchAckResults pairs result entries with request entries by receipt
// handle (falling back to position). A request entry with no result is
// taken as acked, since the top-level status was a success. Servers answer
// in request order, so the pairing is checked by position first and the
// handle index is built only for an answer in another order.
func matchAckResults(entries []AckEntry, results []*rmqpb.AckMessageResultEntry, endpoint string) []error {
	out := make([]error, len(entries))
	inOrder := len(results) == len(entries)
	for j := 0; inOrder && j < len(results); j++ {
		inOrder = results[j].GetReceiptHandle() == entries[j].ReceiptHandle
	}
	if inOrder {
		for j, r := range results {
			out[j] = statusError(r.GetStatus(), "AckMessage", endpoint)
		}
		return out
	}
	byHandle := make(map[string]int, len(entries))
	for i, e := range entries {
		byHandle[e.ReceiptHandle] = i
	}
	for j, r := range results {
		i, ok := byHandle[r.GetReceiptHandle()]
		if !ok {
			if j >= len(entries) {
				continue
			}
			i = j
		}
		out[i] = statusError(r.GetStatus(), "AckMessage", endpoint)
	}
	return out
}

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func (c *Client) consumerCall(rpc, endpoint, topic string) error {
	if !c.cfg.Type.consumer() {
		return clientError(ErrBadRequest, rpc, endpoint, "%s is for consumers", rpc)
	}
	if topic == "" {
		return clientError(ErrBadRequest, rpc, endpoint, "topic is empty")
	}
	return nil
}

// ChangeInvisibleDuration makes a received message visible again after d
// (0 = at once; a negative acknowledgement) and returns the NEW receipt
// handle, which replaces the old one for later acks and changes.
func (c *Client) ChangeInvisibleDuration(ctx context.Context, endpoint, topic, receiptHandle, messageID string, d time.Duration) (string, error) {
	const rpc = "ChangeInvisibleDuration"
	if err := c.consumerCall(rpc, endpoint, topic); err != nil {
		return "", err
	}
	if receiptHandle == "" {
		return "", clientError(ErrBadRequest, rpc, endpoint, "receipt handle is empty")
	}
	if d < 0 {
		return "", clientError(ErrBadRequest, rpc, endpoint, "invisible duration %v is negative", d)
	}
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return "", err
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := ep.stub.ChangeInvisibleDuration(cctx, &rmqpb.ChangeInvisibleDurationRequest{
		Group: c.groupResource(), Topic: c.resource(topic), ReceiptHandle: receiptHandle,
		InvisibleDuration: durationpb.New(d), MessageId: messageID,
	})
	if err = c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus()); err != nil {
		return "", err
	}
	if resp.GetReceiptHandle() == "" {
		return "", &Error{RPC: rpc, Endpoint: ep.addr, Message: "success without a new receipt handle", class: ErrInternal}
	}
	return resp.GetReceiptHandle(), nil
}

// DeadLetterTopic is the name RocketMQ gives the dead-letter topic of a
// consumer group.
func DeadLetterTopic(group string) string { return "%DLQ%" + group }

// DeadLetter describes a message to move to the group's dead-letter queue.
type DeadLetter struct {
	Topic               string
	ReceiptHandle       string
	MessageID           string
	DeliveryAttempt     int32
	MaxDeliveryAttempts int32
}

// ForwardToDeadLetterQueue moves a received message to the consumer
// group's dead-letter queue (and acks it).
func (c *Client) ForwardToDeadLetterQueue(ctx context.Context, endpoint string, d DeadLetter) error {
	const rpc = "ForwardMessageToDeadLetterQueue"
	if err := c.consumerCall(rpc, endpoint, d.Topic); err != nil {
		return err
	}
	if d.ReceiptHandle == "" {
		return clientError(ErrBadRequest, rpc, endpoint, "receipt handle is empty")
	}
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return err
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := ep.stub.ForwardMessageToDeadLetterQueue(cctx, &rmqpb.ForwardMessageToDeadLetterQueueRequest{
		Group: c.groupResource(), Topic: c.resource(d.Topic), ReceiptHandle: d.ReceiptHandle,
		MessageId: d.MessageID, DeliveryAttempt: d.DeliveryAttempt, MaxDeliveryAttempts: d.MaxDeliveryAttempts,
	})
	return c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus())
}

// QueryAssignment asks endpoint which queues this consumer group should
// receive topic from. A real proxy answers one entry per broker with queue
// id -1 (any queue of that broker), or every queue for a FIFO group.
func (c *Client) QueryAssignment(ctx context.Context, endpoint, topic string) ([]Queue, error) {
	const rpc = "QueryAssignment"
	if err := c.consumerCall(rpc, endpoint, topic); err != nil {
		return nil, err
	}
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := ep.stub.QueryAssignment(cctx, &rmqpb.QueryAssignmentRequest{
		Topic: c.resource(topic), Group: c.groupResource(), Endpoints: ep.pbep,
	})
	if err = c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus()); err != nil {
		return nil, err
	}
	out := make([]Queue, 0, len(resp.GetAssignments()))
	for _, a := range resp.GetAssignments() {
		if a.GetMessageQueue() != nil {
			out = append(out, queueFromPB(a.GetMessageQueue(), endpoint))
		}
	}
	return out, nil
}

// EndTransaction commits or rolls back a half message. It must go to the
// endpoint the message was sent to; txID is SendResult.TransactionID.
func (c *Client) EndTransaction(ctx context.Context, endpoint, topic, messageID, txID string, r TransactionResolution) error {
	return c.endTransaction(ctx, endpoint, topic, messageID, txID, "", r, rmqpb.TransactionSource_SOURCE_CLIENT)
}

func (c *Client) endTransaction(ctx context.Context, endpoint, topic, messageID, txID, trace string,
	r TransactionResolution, src rmqpb.TransactionSource) error {
	const rpc = "EndTransaction"
	if c.cfg.Type != Producer {
		return clientError(ErrBadRequest, rpc, endpoint, "EndTransaction is for producers")
	}
	if topic == "" || txID == "" {
		return clientError(ErrBadRequest, rpc, endpoint, "topic and transaction id are required")
	}
	if r != TransactionCommit && r != TransactionRollback {
		return clientError(ErrBadRequest, rpc, endpoint, "resolution must be commit or rollback")
	}
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return err
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := ep.stub.EndTransaction(cctx, &rmqpb.EndTransactionRequest{
		Topic: c.resource(topic), MessageId: messageID, TransactionId: txID,
		Resolution: r.pb(), Source: src, TraceContext: trace,
	})
	return c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus())
}

// RecallMessage cancels a delayed message before its delivery time, using
// the SendResult.RecallHandle. It returns the recalled message's id.
func (c *Client) RecallMessage(ctx context.Context, endpoint, topic, recallHandle string) (string, error) {
	const rpc = "RecallMessage"
	if c.cfg.Type != Producer {
		return "", clientError(ErrBadRequest, rpc, endpoint, "RecallMessage is for producers")
	}
	if topic == "" || recallHandle == "" {
		return "", clientError(ErrBadRequest, rpc, endpoint, "topic and recall handle are required")
	}
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return "", err
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := ep.stub.RecallMessage(cctx, &rmqpb.RecallMessageRequest{Topic: c.resource(topic), RecallHandle: recallHandle})
	if err = c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus()); err != nil {
		return "", err
	}
	return resp.GetMessageId(), nil
}

// Heartbeat sends one heartbeat to endpoint now (the Client also sends
// them every HeartbeatInterval to every endpoint in use). A success is a
// cheap health probe of the endpoint.
func (c *Client) Heartbeat(ctx context.Context, endpoint string) error {
	ep, err := c.prepare(ctx, endpoint, "Heartbeat")
	if err != nil {
		return err
	}
	return c.heartbeat(ctx, ep)
}

func (c *Client) heartbeat(ctx context.Context, ep *endpoint) error {
	const rpc = "Heartbeat"
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := ep.stub.Heartbeat(cctx, &rmqpb.HeartbeatRequest{Group: c.groupResource(), ClientType: c.cfg.Type.pb()})
	return c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus())
}

func (c *Client) notifyTermination(ctx context.Context, ep *endpoint) error {
	const rpc = "NotifyClientTermination"
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := ep.stub.NotifyClientTermination(cctx, &rmqpb.NotifyClientTerminationRequest{Group: c.groupResource()})
	return c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus())
}
