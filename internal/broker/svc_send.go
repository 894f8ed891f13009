package broker

import (
	"context"
	"errors"
	"hash/fnv"
	"time"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/store"
)

func (s *service) SendMessage(ctx context.Context, req *rmqpb.SendMessageRequest) (*rmqpb.SendMessageResponse, error) {
	plan, err := decodeSend(req, &s.b.cfg.Limits, time.Now(), peerHost(ctx))
	return s.b.sendResponse(ctx, plan, err), nil
}

// sendDecoded serves a SendMessage the broker decoded itself (the
// registered handler, see sendMessageHandler). The caller releases req
// after it returns: by then the store or the held path has copied the
// bodies, and the reply holds nothing of req's recycled memory.
func (s *service) sendDecoded(ctx context.Context, req *sendRequest) *sendReply {
	plan, err := req.plan(&s.b.cfg.Limits, time.Now(), peerHost(ctx))
	var out sendOutcome
	if err == nil {
		out, err = s.b.send(ctx, plan)
	}
	switch {
	case err != nil:
		return &sendReply{SendMessageResponse: &rmqpb.SendMessageResponse{Status: toStatus(err)}}
	case out.held != nil:
		return &sendReply{SendMessageResponse: out.response()}
	}
	// An appended request answers without building an entry per message:
	// the reply writes them from the outcome.
	return &sendReply{SendMessageResponse: &rmqpb.SendMessageResponse{Status: out.topStatus()}, appended: &out}
}

// sendResponse stores a validated request (or answers its validation
// error) and builds the response.
func (b *Broker) sendResponse(ctx context.Context, plan *sendPlan, err error) *rmqpb.SendMessageResponse {
	var out sendOutcome
	if err == nil {
		out, err = b.send(ctx, plan)
	}
	if err != nil {
		return &rmqpb.SendMessageResponse{Status: toStatus(err)}
	}
	return out.response()
}

// sendOutcome is what a stored request answers. A held request (see
// sendHeld) has its one entry; an appended one has a status that all its
// messages share, their ids, and the queue offset of the first: message i
// lies at first + i.
type sendOutcome struct {
	held   []*rmqpb.SendResultEntry
	status *rmqpb.Status
	ids    []string
	first  int64
}

// entries returns the outcome as one result entry per message. The
// entries of an appended request share one Status (read-only once built)
// and one backing array, instead of two allocations per message.
func (o *sendOutcome) entries() []*rmqpb.SendResultEntry {
	if o.held != nil {
		return o.held
	}
	backing := make([]rmqpb.SendResultEntry, len(o.ids))
	entries := make([]*rmqpb.SendResultEntry, len(o.ids))
	for i, id := range o.ids {
		e := &backing[i]
		e.Status, e.MessageId, e.Offset = o.status, id, o.first+int64(i)
		entries[i] = e
	}
	return entries
}

// topStatus is the response status of an appended request: its entries'
// one code, as mergeCodes gives it.
func (o *sendOutcome) topStatus() *rmqpb.Status {
	c := o.status.GetCode()
	return &rmqpb.Status{Code: c, Message: c.String()}
}

// response is the generated response of the outcome.
func (o *sendOutcome) response() *rmqpb.SendMessageResponse {
	entries := o.entries()
	codes := make([]*rmqpb.Status, len(entries))
	for i, e := range entries {
		codes[i] = e.GetStatus()
	}
	return &rmqpb.SendMessageResponse{Status: mergeCodes(codes), Entries: entries}
}

// send stores one validated request. All its messages land contiguously in
// one queue.
func (b *Broker) send(ctx context.Context, plan *sendPlan) (sendOutcome, error) {
	t, ok := b.topic(plan.topic)
	if !ok {
		// The proxy checks the message type against the topic's before it
		// looks for queues; a missing topic has no type, so the answer is
		// the type conflict (QueryRoute says TOPIC_NOT_FOUND).
		return sendOutcome{}, statusErr(rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
			"topic %s does not exist, so it accepts no message type", plan.topic)
	}
	if !t.Type.accepts(plan.kind) {
		return sendOutcome{}, statusErr(rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
			"current message type %s does not match the topic's accepted message type %s", plan.kind, t.Type)
	}
	// Transactional messages become half messages; a single delayed message
	// goes to the timer store. A batch of delayed messages is stored at once
	// as the proxy does, and pop holds each until its delivery time.
	if plan.kind == TypeTransaction || (plan.kind == TypeDelay && len(plan.messages) == 1) {
		held, err := b.sendHeld(ctx, t, plan)
		return sendOutcome{held: held}, err
	}
	qid := b.pickQueue(t, plan)
	for i := range plan.messages {
		plan.messages[i].QueueID = qid
	}
	res, err := b.store.Append(ctx, plan.messages)
	if err != nil && !errors.Is(err, store.ErrNotDurable) {
		return sendOutcome{}, err
	}
	out := sendOutcome{status: okStatus(), first: res.FirstOffset, ids: make([]string, len(plan.messages))}
	if err != nil {
		// Written, but the fsync a sync-flush append waits for did not
		// confirm it: the proxy's FLUSH_DISK_TIMEOUT.
		out.status = toStatus(err)
	}
	for i, m := range plan.messages {
		out.ids[i] = m.Properties[propUniqKey]
	}
	b.met.messagesIn.Add(float64(len(plan.messages)))
	return out, nil
}

// pickQueue chooses the queue of a request. A queue id the client names in
// message 0 (0 <= id < queues) is honoured: an extension of this broker (the
// proxy ignores it), so a client that batches per queue gets exactly that
// queue. Any other id (for example -1) lets the broker choose: the message
// group's hash for a single FIFO message, as the proxy does, else round
// robin.
func (b *Broker) pickQueue(t Topic, plan *sendPlan) int32 {
	n := t.Queues
	if plan.queueID >= 0 && int(plan.queueID) < n {
		return plan.queueID
	}
	if plan.group != "" {
		h := fnv.New32a()
		_, _ = h.Write([]byte(plan.group))
		return int32(h.Sum32() % uint32(n))
	}
	return int32(b.nextRR(t.Name) % uint64(n))
}
