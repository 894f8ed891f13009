package broker

import (
	"context"
	"time"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// resolveHandle decodes a receipt handle and finds the group state it
// belongs to. A handle that does not decode is INTERNAL_SERVER_ERROR, as
// from the proxy; one that decodes but does not lead to a delivery of this
// broker, topic and group is INVALID_RECEIPT_HANDLE.
func (b *Broker) resolveHandle(group, topic, handle string) (*groupTopic, receipt, error) {
	r, err := decodeReceipt(handle)
	if err != nil {
		// The proxy fails to decode such a handle with an internal error;
		// INVALID_RECEIPT_HANDLE is its answer for a handle that decodes but
		// no longer names a delivery.
		return nil, receipt{}, statusErr(rmqpb.Code_INTERNAL_SERVER_ERROR, "receipt handle is malformed: %v", err)
	}
	if r.broker != b.cfg.Name {
		return nil, receipt{}, statusErr(rmqpb.Code_INVALID_RECEIPT_HANDLE, "receipt handle was issued by broker %s, not %s", r.broker, b.cfg.Name)
	}
	if r.topic != topic {
		return nil, receipt{}, statusErr(rmqpb.Code_INVALID_RECEIPT_HANDLE, "receipt handle is for topic %s, not %s", r.topic, topic)
	}
	g := b.existingGroupTopic(group, topic)
	if g == nil {
		return nil, receipt{}, statusErr(rmqpb.Code_INVALID_RECEIPT_HANDLE, "receipt handle is unknown to group %s", group)
	}
	return g, r, nil
}

// checkGroupTopic validates the group and topic of an ack-like request.
func (b *Broker) checkGroupTopic(group, topic *rmqpb.Resource) (Group, error) {
	if _, err := b.knownTopic(topic); err != nil {
		return Group{}, err
	}
	return b.knownGroup(group)
}

func (s *service) AckMessage(ctx context.Context, req *rmqpb.AckMessageRequest) (*rmqpb.AckMessageResponse, error) {
	b := s.b
	group, err := b.checkGroupTopic(req.GetGroup(), req.GetTopic())
	if err != nil {
		return &rmqpb.AckMessageResponse{Status: toStatus(err)}, nil
	}
	entries := req.GetEntries()
	resp := &rmqpb.AckMessageResponse{}
	if len(entries) == 0 {
		resp.Status = mergeCodes(nil)
		resp.Status.Message = "ack message result is empty"
		return resp, nil
	}
	// Handles are decoded before any lock is taken; the entries of one
	// group state (all of them, from a client acking what one receive
	// brought) are then acked under one hold of its lock.
	acks := make([]pendingAck, len(entries))
	for i, e := range entries {
		acks[i].g, acks[i].r, acks[i].err = b.resolveHandle(req.GetGroup().GetName(), req.GetTopic().GetName(), e.GetReceiptHandle())
	}
	b.ackAll(acks, time.Now(), group.FIFO)
	// One OK status is shared by the entries that succeeded: the response
	// is only read (marshalled) after this.
	ok := okStatus()
	codes := make([]*rmqpb.Status, len(entries))
	results := make([]rmqpb.AckMessageResultEntry, len(entries))
	resp.Entries = make([]*rmqpb.AckMessageResultEntry, len(entries))
	for i, e := range entries {
		st := ok
		if acks[i].err != nil {
			st = toStatus(acks[i].err)
		}
		codes[i] = st
		results[i] = rmqpb.AckMessageResultEntry{MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: st}
		resp.Entries[i] = &results[i]
	}
	resp.Status = mergeCodes(codes)
	return resp, nil
}

func (s *service) ChangeInvisibleDuration(ctx context.Context, req *rmqpb.ChangeInvisibleDurationRequest) (*rmqpb.ChangeInvisibleDurationResponse, error) {
	b := s.b
	if _, err := b.checkGroupTopic(req.GetGroup(), req.GetTopic()); err != nil {
		return &rmqpb.ChangeInvisibleDurationResponse{Status: toStatus(err)}, nil
	}
	d := req.GetInvisibleDuration()
	if d == nil || d.CheckValid() != nil {
		return &rmqpb.ChangeInvisibleDurationResponse{Status: toStatus(statusErr(rmqpb.Code_ILLEGAL_INVISIBLE_TIME, "invisible duration is missing or invalid"))}, nil
	}
	if err := checkInvisible(d.AsDuration(), 0, b.cfg.Limits.MaxInvisible); err != nil {
		return &rmqpb.ChangeInvisibleDurationResponse{Status: toStatus(err)}, nil
	}
	g, r, err := b.resolveHandle(req.GetGroup().GetName(), req.GetTopic().GetName(), req.GetReceiptHandle())
	if err == nil {
		r, err = b.changeInvisible(g, r, d.AsDuration(), time.Now())
	}
	if err != nil {
		return &rmqpb.ChangeInvisibleDurationResponse{Status: toStatus(err)}, nil
	}
	return &rmqpb.ChangeInvisibleDurationResponse{Status: okStatus(), ReceiptHandle: r.encode()}, nil
}

func (s *service) ForwardMessageToDeadLetterQueue(ctx context.Context, req *rmqpb.ForwardMessageToDeadLetterQueueRequest) (*rmqpb.ForwardMessageToDeadLetterQueueResponse, error) {
	b := s.b
	if _, err := b.checkGroupTopic(req.GetGroup(), req.GetTopic()); err != nil {
		return &rmqpb.ForwardMessageToDeadLetterQueueResponse{Status: toStatus(err)}, nil
	}
	// Like the proxy, delivery_attempt and max_delivery_attempts are not
	// consulted: the message goes to the dead-letter topic now.
	g, r, err := b.resolveHandle(req.GetGroup().GetName(), req.GetTopic().GetName(), req.GetReceiptHandle())
	if err == nil {
		err = b.forwardToDLQ(ctx, g, r, time.Now())
	}
	return &rmqpb.ForwardMessageToDeadLetterQueueResponse{Status: toStatus(err)}, nil
}
