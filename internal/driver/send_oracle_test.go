package driver

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// The generated-types send path the hand-coded one replaced, kept as the
// reference the tests and benchmarks compare against.

// generatedSend builds, with the generated types, the request the driver
// sent for a validated request r before sends were encoded by hand: the
// same fields, set from the same inputs (ids and the shared born time
// come from r, everything else from the messages and the client).
func generatedSend(c *Client, r *sendRequest) *rmqpb.SendMessageRequest {
	msgs := r.msgs
	req := &rmqpb.SendMessageRequest{Messages: make([]*rmqpb.Message, len(msgs))}
	pbMsgs := make([]rmqpb.Message, len(msgs))
	pbProps := make([]rmqpb.SystemProperties, len(msgs))
	topicRes := c.resource(r.topic)
	bornNow := &timestamppb.Timestamp{Seconds: r.bornSec, Nanos: r.bornNanos}
	for i, m := range msgs {
		sp := &pbProps[i]
		sp.Keys = m.Keys
		sp.MessageId = r.ids[i]
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
	return req
}

// answerFromPB is the sendAnswer of a generated response, as the driver
// read responses before they were decoded by hand.
func answerFromPB(resp *rmqpb.SendMessageResponse) *sendAnswer {
	a := &sendAnswer{status: statusOf(resp.GetStatus())}
	for _, e := range resp.GetEntries() {
		a.entries = append(a.entries, sendEntry{
			status:        statusOf(e.GetStatus()),
			offset:        e.GetOffset(),
			transactionID: e.GetTransactionId(),
			recallHandle:  e.GetRecallHandle(),
		})
	}
	return a
}
