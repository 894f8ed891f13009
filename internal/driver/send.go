package driver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// SendResult is the outcome for one message of a Send.
type SendResult struct {
	// MessageID is the id the message was sent with.
	MessageID string
	// QueueID is the queue the request was addressed to (Message.QueueID of
	// its first message: a request lands in one queue, so the ids of the
	// other messages are not used); the embedded broker stores it there, a
	// real proxy may have chosen another queue. AnyQueue when the server
	// chose.
	QueueID int32
	// Offset is the message's queue offset.
	Offset int64
	// TransactionID is set for transactional messages; EndTransaction
	// needs it.
	TransactionID string
	// RecallHandle can cancel a delayed message (RecallMessage).
	RecallHandle string
	// Err is set when this message failed while others of the same request
	// succeeded (a MULTIPLE_RESULTS answer).
	Err error
}

// Send sends msgs (1..N, one topic) to endpoint in one SendMessage call.
//
// The returned error is set when the whole request failed (transport,
// top-level status, malformed response); results is nil then. Otherwise
// there is one result per message, in order, each possibly with its own Err.
//
// Two answer shapes are normalized: the embedded broker answers one entry
// per message; a real proxy answers a single entry for a batch (its message
// id is the comma-joined ids, or a fresh one, and its offset the first
// message's). A batch of N stored contiguously from offset o gives message i
// the offset o+i, and every result carries the id the client sent.
func (c *Client) Send(ctx context.Context, endpoint string, msgs []*Message) ([]SendResult, error) {
	const rpc = "SendMessage"
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return nil, err
	}
	maxBody := 0
	if s := ep.tel.settings.Load(); s != nil {
		maxBody = s.MaxBodySize
	}
	req, ids, err := c.buildSend(msgs, endpoint, maxBody)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	resp, err := ep.stub.SendMessage(cctx, req)
	cancel()
	if err = c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus()); err != nil {
		return nil, err
	}
	return normalizeSend(resp, msgs, ids, ep.addr)
}

// buildSend validates msgs and builds the request. ids are the message ids
// in order (generated where the caller left them empty); msgs is never
// modified.
func (c *Client) buildSend(msgs []*Message, endpoint string, maxBody int) (*rmqpb.SendMessageRequest, []string, error) {
	const rpc = "SendMessage"
	if len(msgs) == 0 {
		return nil, nil, clientError(ErrBadRequest, rpc, endpoint, "no message to send")
	}
	topic := ""
	var topicRes *rmqpb.Resource
	req := &rmqpb.SendMessageRequest{Messages: make([]*rmqpb.Message, len(msgs))}
	ids := make([]string, len(msgs))
	// One allocation each for all the messages of a request and all their
	// system properties, rather than two per message: a batch is built on
	// the path every sender of the key waits on.
	pbMsgs := make([]rmqpb.Message, len(msgs))
	pbProps := make([]rmqpb.SystemProperties, len(msgs))
	now := time.Now()
	bornNow := timestamppb.New(now)
	for i, m := range msgs {
		if m == nil {
			return nil, nil, clientError(ErrBadRequest, rpc, endpoint, "message %d is nil", i)
		}
		if i == 0 {
			topic = m.Topic
			if strings.TrimSpace(topic) == "" {
				return nil, nil, clientError(ErrBadRequest, rpc, endpoint, "message 0 has no topic")
			}
			topicRes = c.resource(topic)
		} else if m.Topic != topic {
			return nil, nil, clientError(ErrBadRequest, rpc, endpoint,
				"message %d has topic %q, but a request carries one topic (%q)", i, m.Topic, topic)
		}
		if len(m.Body) == 0 {
			return nil, nil, clientError(ErrBadRequest, rpc, endpoint, "message %d has an empty body", i)
		}
		if maxBody > 0 && len(m.Body) > maxBody {
			return nil, nil, clientError(ErrTooLarge, rpc, endpoint,
				"message %d body is %d bytes, the server accepts at most %d", i, len(m.Body), maxBody)
		}
		if m.Transactional && (m.Group != "" || !m.DeliveryTime.IsZero()) {
			return nil, nil, clientError(ErrBadRequest, rpc, endpoint,
				"message %d: a transactional message can have neither a message group nor a delivery time", i)
		}
		if m.Transactional && len(msgs) > 1 {
			return nil, nil, clientError(ErrBadRequest, rpc, endpoint, "transactional messages are sent one per request")
		}
		id := m.ID
		if id == "" {
			id = c.ids.Next()
		}
		ids[i] = id
		sp := &pbProps[i]
		sp.Keys = m.Keys
		sp.MessageId = id
		sp.BodyEncoding = rmqpb.Encoding_IDENTITY
		sp.MessageType = rmqpb.MessageType(m.Type())
		sp.BornHost = m.BornHost
		sp.QueueId = m.QueueID
		if m.Tag != "" {
			sp.Tag = &m.Tag
		}
		if m.Group != "" {
			sp.MessageGroup = &m.Group
		}
		if m.TraceContext != "" {
			sp.TraceContext = &m.TraceContext
		}
		if sp.BornHost == "" {
			sp.BornHost = c.hostname
		}
		if m.BornTime.IsZero() {
			sp.BornTimestamp = bornNow
		} else {
			sp.BornTimestamp = timestamppb.New(m.BornTime)
		}
		if !m.DeliveryTime.IsZero() {
			sp.DeliveryTimestamp = timestamppb.New(m.DeliveryTime)
		}
		if m.Transactional && m.OrphanRecovery > 0 {
			sp.OrphanedTransactionRecoveryDuration = durationpb.New(m.OrphanRecovery)
		}
		pm := &pbMsgs[i]
		pm.Topic = topicRes
		pm.UserProperties = m.Properties
		pm.SystemProperties = sp
		pm.Body = m.Body
		req.Messages[i] = pm
	}
	return req, ids, nil
}

// normalizeSend maps a successful top-level answer to one result per
// message. It never panics on any response.
func normalizeSend(resp *rmqpb.SendMessageResponse, msgs []*Message, ids []string, endpoint string) ([]SendResult, error) {
	const rpc = "SendMessage"
	entries := resp.GetEntries()
	n := len(ids)
	results := make([]SendResult, n)
	// The server stores a whole request in the queue message 0 names.
	queue := AnyQueue
	if len(msgs) > 0 && msgs[0] != nil && msgs[0].QueueID >= 0 {
		queue = msgs[0].QueueID
	}
	for i := range results {
		results[i].MessageID = ids[i]
		results[i].QueueID = queue
	}
	switch {
	case len(entries) == n:
		for i, e := range entries {
			if e == nil {
				results[i].Err = &Error{RPC: rpc, Endpoint: endpoint, Message: "missing result entry", class: ErrInternal}
				continue
			}
			if err := statusError(e.GetStatus(), rpc, endpoint); err != nil {
				results[i].Err = err
				continue
			}
			results[i].Offset = e.GetOffset()
			results[i].TransactionID = e.GetTransactionId()
			results[i].RecallHandle = e.GetRecallHandle()
		}
		return results, nil
	case len(entries) == 1 && n > 1:
		e := entries[0]
		if err := statusError(e.GetStatus(), rpc, endpoint); err != nil {
			return nil, err
		}
		first := e.GetOffset()
		for i := range results {
			results[i].Offset = first + int64(i)
			results[i].TransactionID = e.GetTransactionId()
		}
		return results, nil
	case len(entries) == 0:
		// The top-level status said the messages were stored: the answer
		// is malformed, but resending would duplicate them.
		return nil, &Error{Code: resp.GetStatus().GetCode(), RPC: rpc, Endpoint: endpoint,
			Message: "server answered success without result entries", class: ErrInternal, stored: true}
	default:
		return nil, &Error{Code: resp.GetStatus().GetCode(), RPC: rpc, Endpoint: endpoint,
			Message: fmt.Sprintf("server answered %d result entries for %d messages", len(entries), n), class: ErrInternal, stored: true}
	}
}
