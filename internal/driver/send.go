package driver

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"

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
	return c.SendInto(ctx, endpoint, msgs, nil)
}

// SendInto is Send with the results appended to results[:0], whose memory
// a caller sending many batches can reuse.
func (c *Client) SendInto(ctx context.Context, endpoint string, msgs []*Message, results []SendResult) ([]SendResult, error) {
	const rpc = "SendMessage"
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return nil, err
	}
	maxBody := 0
	if s := ep.tel.settings.Load(); s != nil {
		maxBody = s.MaxBodySize
	}
	call := c.getSendCall()
	defer c.putSendCall(call)
	req, resp := &call.req, &call.resp
	if err := c.prepareSend(req, msgs, endpoint, maxBody); err != nil {
		return nil, err
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	// The connection's Invoke with the options the generated stub passes:
	// the codec sees the hand-coded request and response (see
	// sendRequest), everything else of the call is the stub's.
	err = ep.conn.Invoke(cctx, rmqpb.MessagingService_SendMessage_FullMethodName, req, resp, grpc.StaticMethod())
	cancel()
	if err = c.finishStatus(ctx, rpc, ep.addr, start, err, resp.status); err != nil {
		return nil, err
	}
	return normalizeSend(&resp.sendAnswer, msgs, req.ids, ep.addr, results)
}

// sendAnswer is what normalizeSend needs of a SendMessageResponse. The
// hand-coded decoder (sendResponse) fills it; entries are values, never
// missing.
type sendAnswer struct {
	status  wireStatus
	entries []sendEntry
}

// sendEntry is one SendResultEntry. Its message_id is not kept: results
// carry the ids the client sent (see Send), and a proxy's id for a batch is
// the comma-joined ids of all its messages, a copy per response for
// nothing.
type sendEntry struct {
	status        wireStatus
	offset        int64
	transactionID string
	recallHandle  string
}

// noTransactionID is the error of a transactional message the server says
// it stored but gave no transaction id for: it can be neither committed
// nor rolled back (the broker checks it back), and resending would store
// it twice.
func noTransactionID(resp *sendAnswer, endpoint string) error {
	return &Error{Code: resp.status.code, RPC: "SendMessage", Endpoint: endpoint,
		Message: "server stored a transactional message without a transaction id", class: ErrInternal, stored: true}
}

// normalizeSend maps a successful top-level answer to one result per
// message. It never panics on any answer.
func normalizeSend(resp *sendAnswer, msgs []*Message, ids []string, endpoint string, into []SendResult) ([]SendResult, error) {
	const rpc = "SendMessage"
	entries := resp.entries
	n := len(ids)
	results := slices.Grow(into[:0], n)[:n]
	clear(results)
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
		for i := range entries {
			e := &entries[i]
			if err := e.status.err(rpc, endpoint); err != nil {
				results[i].Err = err
				continue
			}
			results[i].Offset = e.offset
			results[i].TransactionID = e.transactionID
			results[i].RecallHandle = e.recallHandle
			if e.transactionID == "" && i < len(msgs) && msgs[i] != nil && msgs[i].Transactional {
				results[i].Err = noTransactionID(resp, endpoint)
			}
		}
		return results, nil
	case len(entries) == 1 && n > 1:
		e := &entries[0]
		if err := e.status.err(rpc, endpoint); err != nil {
			return nil, err
		}
		first := e.offset
		for i := range results {
			results[i].Offset = first + int64(i)
			results[i].TransactionID = e.transactionID
			if e.transactionID == "" && i < len(msgs) && msgs[i] != nil && msgs[i].Transactional {
				results[i].Err = noTransactionID(resp, endpoint)
			}
		}
		return results, nil
	case len(entries) == 0:
		// The top-level status said the messages were stored: the answer
		// is malformed, but resending would duplicate them.
		return nil, &Error{Code: resp.status.code, RPC: rpc, Endpoint: endpoint,
			Message: "server answered success without result entries", class: ErrInternal, stored: true}
	default:
		return nil, &Error{Code: resp.status.code, RPC: rpc, Endpoint: endpoint,
			Message: fmt.Sprintf("server answered %d result entries for %d messages", len(entries), n), class: ErrInternal, stored: true}
	}
}
