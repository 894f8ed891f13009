package consumer

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/pb/forwardpb"
	"github.com/twinmq/twinmq/lane"
)

// Handler processes one message. A nil error acknowledges it; an error (or
// a panic) makes it come back later, and after the group's maximum
// attempts it goes to the dead-letter topic. ctx carries the message's lane
// (lane.FromContext) and shadow mark (lane.IsShadow), so sends made from
// the handler keep them, and ends when
// the consumer gives up on the delivery (Close's deadline, or the
// forwarding deadline of a forwarded message).
type Handler func(ctx context.Context, m *Message) error

// Message is one delivered message as a handler sees it. The handler may
// keep it; the consumer does not touch it after the handler returned.
type Message struct {
	// ID is the message id the producer gave it.
	ID string
	// Topic is the logic topic subscribed to.
	Topic string
	// PhysicalTopic is the RocketMQ topic it was stored in.
	PhysicalTopic string
	// Cluster is the name of the cluster it came from.
	Cluster string
	// Endpoint is the broker it was received from.
	Endpoint string
	// Tag is the RocketMQ tag ("" = none).
	Tag string
	// Keys are the RocketMQ message keys.
	Keys []string
	// Properties are the user properties, the lane property included.
	Properties map[string]string
	// Body is the payload.
	Body []byte
	// MessageGroup is the FIFO group ("" for an unordered message).
	MessageGroup string
	// Lane is the message's lane ("" = base); also in the handler's ctx.
	Lane string
	// Shadow is set for shadow (stress-test) traffic: the message was
	// received from a shadow topic in the shadow group. The handler's ctx
	// carries the same mark (lane.IsShadow).
	Shadow bool
	// DeliveryAttempt is 1 on the first delivery.
	DeliveryAttempt int
	// BornTime is when the producer created it.
	BornTime time.Time
	// QueueID and QueueOffset locate it in its broker.
	QueueID     int32
	QueueOffset int64
	// Forwarded is set when another consumer of the group received the
	// message and forwarded it here because this consumer serves its lane.
	Forwarded bool
	// TraceContext is the trace context the producer gave the message, in
	// RocketMQ's trace-context system property (RocketMQ 5 clients put a
	// W3C traceparent there); "" when it has none. Forwarding keeps it.
	TraceContext string
}

// newMessage builds the handler's view of a received message. The lane is
// read from the properties; a malformed lane is base (see lane.Extract).
func newMessage(logicTopic, cluster string, m *driver.ReceivedMessage) *Message {
	return &Message{
		ID:              m.ID,
		Topic:           logicTopic,
		PhysicalTopic:   m.Topic,
		Cluster:         cluster,
		Endpoint:        m.Endpoint,
		Tag:             m.Tag,
		Keys:            m.Keys,
		Properties:      m.Properties,
		Body:            m.Body,
		MessageGroup:    m.Group,
		Lane:            laneOf(m.Properties),
		DeliveryAttempt: int(m.DeliveryAttempt),
		BornTime:        m.BornTime,
		QueueID:         m.QueueID,
		QueueOffset:     m.QueueOffset,
		TraceContext:    m.TraceContext,
	}
}

// laneOf is the message's lane: its property when well-formed, else base.
func laneOf(props map[string]string) string {
	l := props[lane.PropertyLane]
	if lane.Validate(l) != nil {
		return lane.Base
	}
	return l
}

// toForwarded is the wire form of m for the forwarding service.
func toForwarded(m *Message) *forwardpb.ForwardedMessage {
	f := &forwardpb.ForwardedMessage{
		Topic:           m.Topic,
		MessageId:       m.ID,
		Tag:             m.Tag,
		Keys:            m.Keys,
		UserProperties:  m.Properties,
		Body:            m.Body,
		DeliveryAttempt: int32(m.DeliveryAttempt),
		MessageGroup:    m.MessageGroup,
		QueueId:         m.QueueID,
		QueueOffset:     m.QueueOffset,
		TraceContext:    m.TraceContext,
	}
	if !m.BornTime.IsZero() {
		f.BornTimestampMs = m.BornTime.UnixMilli()
	}
	return f
}

// fromForwarded rebuilds a Message from a forwarded delivery.
func fromForwarded(req *forwardpb.DeliverRequest) *Message {
	f := req.GetMessage()
	m := &Message{
		ID:              f.GetMessageId(),
		Topic:           f.GetTopic(),
		Cluster:         req.GetOriginCluster(),
		Endpoint:        req.GetOriginEndpoint(),
		Tag:             f.GetTag(),
		Keys:            f.GetKeys(),
		Properties:      maps.Clone(f.GetUserProperties()),
		Body:            f.GetBody(),
		MessageGroup:    f.GetMessageGroup(),
		DeliveryAttempt: int(f.GetDeliveryAttempt()),
		QueueID:         f.GetQueueId(),
		QueueOffset:     f.GetQueueOffset(),
		TraceContext:    f.GetTraceContext(),
		Forwarded:       true,
	}
	if ms := f.GetBornTimestampMs(); ms != 0 {
		m.BornTime = time.UnixMilli(ms)
	}
	m.Lane = laneOf(m.Properties)
	return m
}

// clone returns a copy of m that shares nothing with it.
func (m *Message) clone() *Message {
	c := *m
	c.Keys = slices.Clone(m.Keys)
	c.Properties = maps.Clone(m.Properties)
	c.Body = slices.Clone(m.Body)
	return &c
}
