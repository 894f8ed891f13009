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
// bodies.
func (s *service) sendDecoded(ctx context.Context, req *sendRequest) (*rmqpb.SendMessageResponse, error) {
	plan, err := req.plan(&s.b.cfg.Limits, time.Now(), peerHost(ctx))
	return s.b.sendResponse(ctx, plan, err), nil
}

// sendResponse stores a validated request (or answers its validation
// error) and builds the response.
func (b *Broker) sendResponse(ctx context.Context, plan *sendPlan, err error) *rmqpb.SendMessageResponse {
	var entries []*rmqpb.SendResultEntry
	if err == nil {
		entries, err = b.send(ctx, plan)
	}
	if err != nil {
		return &rmqpb.SendMessageResponse{Status: toStatus(err)}
	}
	codes := make([]*rmqpb.Status, len(entries))
	for i, e := range entries {
		codes[i] = e.GetStatus()
	}
	return &rmqpb.SendMessageResponse{Status: mergeCodes(codes), Entries: entries}
}

// send stores one validated request. All its messages land contiguously in
// one queue; each gets its own result entry.
func (b *Broker) send(ctx context.Context, plan *sendPlan) ([]*rmqpb.SendResultEntry, error) {
	t, ok := b.topic(plan.topic)
	if !ok {
		// The proxy checks the message type against the topic's before it
		// looks for queues; a missing topic has no type, so the answer is
		// the type conflict (QueryRoute says TOPIC_NOT_FOUND).
		return nil, statusErr(rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
			"topic %s does not exist, so it accepts no message type", plan.topic)
	}
	if !t.Type.accepts(plan.kind) {
		return nil, statusErr(rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
			"current message type %s does not match the topic's accepted message type %s", plan.kind, t.Type)
	}
	// Transactional messages become half messages; a single delayed message
	// goes to the timer store. A batch of delayed messages is stored at once
	// as the proxy does, and pop holds each until its delivery time.
	if plan.kind == TypeTransaction || (plan.kind == TypeDelay && len(plan.messages) == 1) {
		return b.sendHeld(ctx, t, plan)
	}
	qid := b.pickQueue(t, plan)
	for i := range plan.messages {
		plan.messages[i].QueueID = qid
	}
	res, err := b.store.Append(ctx, plan.messages)
	if err != nil && !errors.Is(err, store.ErrNotDurable) {
		return nil, err
	}
	// Every entry of the request has the same status; they share one
	// Status (read-only once built), and the entries one backing array,
	// instead of two allocations per message.
	st := okStatus()
	if err != nil {
		// Written, but the fsync a sync-flush append waits for did not
		// confirm it: the proxy's FLUSH_DISK_TIMEOUT.
		st = toStatus(err)
	}
	backing := make([]rmqpb.SendResultEntry, len(plan.messages))
	entries := make([]*rmqpb.SendResultEntry, len(plan.messages))
	for i, m := range plan.messages {
		e := &backing[i]
		e.Status, e.MessageId, e.Offset = st, m.Properties[propUniqKey], res.FirstOffset+int64(i)
		entries[i] = e
	}
	b.met.messagesIn.Add(float64(len(plan.messages)))
	return entries, nil
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
