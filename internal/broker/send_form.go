package broker

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// sendMsg is one message of a SendMessageRequest as validation reads it:
// the fields the broker uses, with presence where a rule depends on it. Two
// decoders fill it, sendMsgsOf from the generated messages and sendRequest
// straight from the wire, and planSend validates it, so the proxy's rules
// exist once. The strings are the broker's own (never views of a receive
// buffer); body may be a view of one, which the store copies on append.
type sendMsg struct {
	topic     string
	namespace string
	// user holds the user properties in wire order; a later entry of a key
	// replaces an earlier one, as in a protobuf map.
	user            []userProp
	hasTag          bool
	tag             string
	keys            []string
	messageID       string
	bodyEncoding    rmqpb.Encoding
	messageType     rmqpb.MessageType
	born            pbTime
	bornHost        string
	delivery        pbTime
	queueID         int32
	deliveryAttempt int32
	group           string
	traceContext    string
	// recovery is the orphaned transaction recovery duration, a Duration
	// with the same two fields as a Timestamp.
	recovery pbTime
	body     []byte
}

type userProp struct{ key, value string }

// pbTime is a google.protobuf.Timestamp or Duration field: seconds, nanos,
// and whether the message was present.
type pbTime struct {
	seconds int64
	nanos   int32
	set     bool
}

func pbTimeOf(seconds int64, nanos int32, set bool) pbTime {
	return pbTime{set: set, seconds: seconds, nanos: nanos}
}

// timestamp and duration build the generated types only where validation
// needs their exact checks and messages (delayed and transactional
// messages, not the common path).
func (t pbTime) timestamp() *timestamppb.Timestamp {
	return &timestamppb.Timestamp{Seconds: t.seconds, Nanos: t.nanos}
}

func (t pbTime) duration() *durationpb.Duration {
	return &durationpb.Duration{Seconds: t.seconds, Nanos: t.nanos}
}

// unixMilli is a present and valid Timestamp in unix milliseconds, with the
// validity rule of timestamppb.Timestamp.IsValid.
func (t pbTime) unixMilli() (int64, bool) {
	if !t.set {
		return 0, false
	}
	ts := timestamppb.Timestamp{Seconds: t.seconds, Nanos: t.nanos}
	if !ts.IsValid() {
		return 0, false
	}
	return ts.AsTime().UnixMilli(), true
}

// sendMsgsOf reads the messages of a generated request into the form
// validation reads. Strings and bodies are shared with req.
func sendMsgsOf(req *rmqpb.SendMessageRequest) []sendMsg {
	msgs := req.GetMessages()
	out := make([]sendMsg, len(msgs))
	for i, m := range msgs {
		out[i] = sendMsgOf(m)
	}
	return out
}

func sendMsgOf(m *rmqpb.Message) sendMsg {
	sp := m.GetSystemProperties()
	if sp == nil {
		sp = &rmqpb.SystemProperties{}
	}
	var user []userProp
	if up := m.GetUserProperties(); len(up) > 0 {
		user = make([]userProp, 0, len(up))
		for k, v := range up {
			user = append(user, userProp{key: k, value: v})
		}
	}
	bt, dt, rd := sp.GetBornTimestamp(), sp.GetDeliveryTimestamp(), sp.GetOrphanedTransactionRecoveryDuration()
	return sendMsg{
		topic:           m.GetTopic().GetName(),
		namespace:       m.GetTopic().GetResourceNamespace(),
		user:            user,
		hasTag:          sp.Tag != nil,
		tag:             sp.GetTag(),
		keys:            sp.GetKeys(),
		messageID:       sp.GetMessageId(),
		bodyEncoding:    sp.GetBodyEncoding(),
		messageType:     sp.GetMessageType(),
		born:            pbTimeOf(bt.GetSeconds(), bt.GetNanos(), bt != nil),
		bornHost:        sp.GetBornHost(),
		delivery:        pbTimeOf(dt.GetSeconds(), dt.GetNanos(), dt != nil),
		queueID:         sp.GetQueueId(),
		deliveryAttempt: sp.GetDeliveryAttempt(),
		group:           sp.GetMessageGroup(),
		traceContext:    sp.GetTraceContext(),
		recovery:        pbTimeOf(rd.GetSeconds(), rd.GetNanos(), rd != nil),
		body:            m.GetBody(),
	}
}
