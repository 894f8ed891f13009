package broker

import (
	"context"
	"crypto/md5"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/store"
)

// replyMargin is kept free before the caller's deadline when a long poll is
// cut to it, so the "not found" answer reaches the client before its
// deadline does.
const replyMargin = 100 * time.Millisecond

// receiveRequest is a validated ReceiveMessageRequest.
type receiveRequest struct {
	group   Group
	topic   Topic
	opts    popOptions
	polling time.Duration
}

// checkReceive validates a receive as the proxy does, in the proxy's order:
// polling time against the deadline, topic and group, invisible time, filter.
func (b *Broker) checkReceive(ctx context.Context, req *rmqpb.ReceiveMessageRequest, clientID string, now time.Time) (*receiveRequest, error) {
	lim := &b.cfg.Limits
	dl, ok := ctx.Deadline()
	if !ok {
		// The proxy fails such a call with an internal error; a clear
		// BAD_REQUEST says what to mend.
		return nil, statusErr(rmqpb.Code_BAD_REQUEST, "ReceiveMessage requires a gRPC deadline (long polling time plus request timeout)")
	}
	remaining := dl.Sub(now)
	var polling time.Duration
	if lpt := req.GetLongPollingTimeout(); lpt != nil {
		polling = lpt.AsDuration()
	} else {
		polling = remaining - b.clientSettings(clientID).GetRequestTimeout().AsDuration()/2
	}
	polling = min(max(polling, lim.MinLongPolling), lim.MaxLongPolling)
	if polling > remaining && remaining < lim.MinLongPolling {
		// Clients older than 5.0.3 (or that do not say) get BAD_REQUEST, as
		// from the proxy.
		code := rmqpb.Code_ILLEGAL_POLLING_TIME
		if v := clientVersionFrom(ctx); v == "" || v < "5.0.3" {
			code = rmqpb.Code_BAD_REQUEST
		}
		return nil, statusErr(code, "the deadline time remaining is not enough for polling, please check network condition")
	}
	// Answer before the caller's deadline, not at it.
	polling = max(min(polling, remaining-replyMargin), 0)
	t, err := b.knownTopic(req.GetMessageQueue().GetTopic())
	if err != nil {
		return nil, err
	}
	g, err := b.knownGroup(req.GetGroup())
	if err != nil {
		return nil, err
	}
	invisible := req.GetInvisibleDuration().AsDuration()
	if req.GetAutoRenew() {
		invisible = lim.AutoRenewSlice
	} else if err := checkInvisible(invisible, lim.MinInvisible, lim.MaxInvisible); err != nil {
		return nil, err
	}
	filter, err := parseFilter(req.GetFilterExpression())
	if err != nil {
		return nil, err
	}
	n := int(req.GetBatchSize())
	if n <= 0 {
		return nil, statusErr(rmqpb.Code_BAD_REQUEST, "batch size %d must be positive", n)
	}
	n = min(n, lim.MaxBatchSize)
	queues := make([]int32, t.Queues)
	for i := range queues {
		queues[i] = int32(i)
	}
	return &receiveRequest{group: g, topic: t, polling: polling, opts: popOptions{
		queues:      queues,
		max:         n,
		invisible:   invisible,
		filter:      filter,
		fifo:        g.FIFO,
		maxAttempts: int32(g.MaxDeliveryAttempts),
		autoRenew:   req.GetAutoRenew(),
		client:      clientID,
	}}, nil
}

// receive pops messages, long polling until some are deliverable, the
// polling time ends, the caller goes away or the broker closes.
func (b *Broker) receive(ctx context.Context, rr *receiveRequest) ([]popped, error) {
	g := b.groupTopicFor(rr.group.Name, rr.topic.Name)
	end := time.Now().Add(rr.polling)
	timer := time.NewTimer(rr.polling)
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			return nil, nil
		}
		// Take the wake-up channels before looking, so that nothing that
		// happens during the pop is missed.
		arrivals := b.store.Arrivals(rr.topic.Name)
		changed := g.changedChan()
		now := time.Now()
		rr.opts.now = now
		out, nextDue, err := b.pop(ctx, g, rr.opts)
		if err != nil || len(out) > 0 {
			return out, err
		}
		if !now.Before(end) {
			return nil, nil
		}
		wait := end.Sub(now)
		if nextDue > 0 {
			if d := time.Until(time.UnixMilli(nextDue)); d < wait {
				wait = max(d, 0)
			}
		}
		if wait == 0 {
			continue
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-b.stop:
			return nil, nil
		case <-arrivals:
		case <-changed:
		case <-timer.C:
		}
	}
}

func (s *service) ReceiveMessage(req *rmqpb.ReceiveMessageRequest, stream grpc.ServerStreamingServer[rmqpb.ReceiveMessageResponse]) error {
	ctx := stream.Context()
	b := s.b
	clientID := clientIDFrom(ctx)
	finish := func(st *rmqpb.Status) error {
		if err := stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: st}}); err != nil {
			return err
		}
		return stream.Send(deliveryTimestampResponse(time.Now()))
	}
	rr, err := b.checkReceive(ctx, req, clientID, time.Now())
	if err != nil {
		return finish(toStatus(err))
	}
	msgs, err := b.receive(ctx, rr)
	if err != nil {
		b.nackAll(rr, msgs)
		return finish(toStatus(err))
	}
	if len(msgs) == 0 {
		return finish(&rmqpb.Status{Code: rmqpb.Code_MESSAGE_NOT_FOUND, Message: "no new message"})
	}
	// Every message is converted (digest included) before the first is
	// written, so the writes follow each other closely and gRPC's writer
	// coalesces them into few socket writes instead of one per message.
	// The frames on the wire are the same: one response per message.
	ns := req.GetMessageQueue().GetTopic().GetResourceNamespace()
	resps := make([]rmqpb.ReceiveMessageResponse, len(msgs))
	contents := make([]rmqpb.ReceiveMessageResponse_Message, len(msgs))
	for i := range msgs {
		contents[i].Message = b.toMessage(&msgs[i], ns)
		resps[i].Content = &contents[i]
	}
	if err := stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: okStatus()}}); err != nil {
		b.nackAll(rr, msgs)
		return err
	}
	for i := range msgs {
		if err := stream.Send(&resps[i]); err != nil {
			// Those not written go back at once, as the proxy does (it nacks
			// them to one second).
			b.countOut(msgs[:i])
			b.nackAll(rr, msgs[i:])
			return err
		}
	}
	b.countOut(msgs)
	return stream.Send(deliveryTimestampResponse(time.Now()))
}

// countOut counts written deliveries, redeliveries among them.
func (b *Broker) countOut(msgs []popped) {
	redelivered := 0
	for i := range msgs {
		if msgs[i].attempts > 1 {
			redelivered++
		}
	}
	b.met.messagesOut.Add(float64(len(msgs)))
	if redelivered > 0 {
		b.met.redelivered.Add(float64(redelivered))
	}
}

// nackAll makes deliveries that never reached the client visible again
// after a second.
func (b *Broker) nackAll(rr *receiveRequest, msgs []popped) {
	if len(msgs) == 0 {
		return
	}
	g := b.groupTopicFor(rr.group.Name, rr.topic.Name)
	for _, p := range msgs {
		_, _ = b.changeInvisible(g, p.handle, time.Second, time.Now())
	}
}

// toMessage converts a delivery to the protocol's Message, as the proxy's
// converter does. It runs for every message delivered, so it allocates
// only what the response keeps.
func (b *Broker) toMessage(p *popped, namespace string) *rmqpb.Message {
	m := p.msg
	props := m.Properties
	var user map[string]string
	for k, v := range props {
		switch k {
		case propShardingKey, propTraceContext, propRecovery:
			// Carried in system properties.
		default:
			if !isReservedKey(k) {
				if user == nil {
					user = make(map[string]string, len(props))
				}
				user[k] = v
			}
		}
	}
	sp := &rmqpb.SystemProperties{
		MessageId:       props[propUniqKey],
		BodyDigest:      &rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: md5Upper(m.Body)},
		BodyEncoding:    rmqpb.Encoding_IDENTITY,
		MessageType:     storedKind(m),
		BornTimestamp:   timestamppb.New(time.UnixMilli(m.BornTimestamp)),
		BornHost:        m.BornHost,
		StoreTimestamp:  timestamppb.New(time.UnixMilli(m.StoreTimestamp)),
		StoreHost:       b.addr,
		ReceiptHandle:   proto.String(p.handle.encode()),
		QueueId:         m.QueueID,
		QueueOffset:     proto.Int64(m.QueueOffset),
		DeliveryAttempt: proto.Int32(p.attempts),
	}
	if m.Flags&FlagCompressed != 0 {
		sp.BodyEncoding = rmqpb.Encoding_GZIP
	}
	if m.Tag != "" {
		sp.Tag = proto.String(m.Tag)
	}
	if k := props[propKeys]; k != "" {
		sp.Keys = strings.Fields(k)
	}
	if at := deliverAt(m); at > 0 {
		sp.DeliveryTimestamp = timestamppb.New(time.UnixMilli(at))
	}
	if g := props[propShardingKey]; g != "" {
		sp.MessageGroup = proto.String(g)
	}
	if tc := props[propTraceContext]; tc != "" {
		sp.TraceContext = proto.String(tc)
	}
	if origin := props[propDLQTopic]; origin != "" {
		sp.DeadLetterQueue = &rmqpb.DeadLetterQueue{Topic: origin, MessageId: props[propDLQMessageID]}
	}
	if props[propTranMsg] == "true" {
		if sec, err := strconv.ParseInt(props[propRecovery], 10, 64); err == nil {
			sp.OrphanedTransactionRecoveryDuration = durationpb.New(time.Duration(sec) * time.Second)
		}
	}
	return &rmqpb.Message{
		Topic:            &rmqpb.Resource{ResourceNamespace: namespace, Name: m.Topic},
		UserProperties:   user,
		SystemProperties: sp,
		Body:             m.Body,
	}
}

// md5Upper is the body digest as the proxy writes it: MD5 in upper-case
// hex.
func md5Upper(body []byte) string {
	const digits = "0123456789ABCDEF"
	sum := md5.Sum(body)
	var out [2 * md5.Size]byte
	for i, c := range sum {
		out[2*i] = digits[c>>4]
		out[2*i+1] = digits[c&0x0f]
	}
	return string(out[:])
}

// storedKind re-infers the type of a stored message.
func storedKind(m *store.StoredMessage) rmqpb.MessageType {
	switch {
	case m.Properties[propTranMsg] == "true":
		return rmqpb.MessageType_TRANSACTION
	case m.Properties[propTimerDeliver] != "":
		return rmqpb.MessageType_DELAY
	case m.Properties[propShardingKey] != "":
		return rmqpb.MessageType_FIFO
	}
	return rmqpb.MessageType_NORMAL
}
