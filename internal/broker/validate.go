package broker

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/store"
)

// sendPlan is a validated SendMessageRequest, decoded into store messages.
type sendPlan struct {
	topic string
	// kind is the message type inferred from message 0, as the proxy does:
	// TRANSACTION > DELAY > FIFO > NORMAL.
	kind MessageType
	// queueID is the queue the client named in message 0 (see pickQueue).
	queueID int32
	// group is message 0's message group when the request has one message;
	// it drives the queue choice when the client names no queue.
	group    string
	messages []store.Message
}

// decodeSend validates a send request with the proxy's rules and codes and
// converts its messages. It reads nothing but its arguments, so it can be
// fuzzed. bornHost is the peer address, used when a message names none.
func decodeSend(req *rmqpb.SendMessageRequest, lim *Limits, now time.Time, bornHost string) (*sendPlan, error) {
	msgs := req.GetMessages()
	if len(msgs) == 0 {
		return nil, statusErr(rmqpb.Code_MESSAGE_CORRUPTED, "no message to send")
	}
	first := msgs[0]
	topic := first.GetTopic().GetName()
	ns := first.GetTopic().GetResourceNamespace()
	for _, m := range msgs[1:] {
		if m.GetTopic().GetName() != topic || m.GetTopic().GetResourceNamespace() != ns {
			return nil, statusErr(rmqpb.Code_MESSAGE_CORRUPTED, "topic in message is not same")
		}
	}
	if err := checkTopicName(topic); err != nil {
		return nil, statusErr(rmqpb.Code_ILLEGAL_TOPIC, "topic %q is illegal: %v", topic, err)
	}
	if strings.HasPrefix(topic, retryPrefix) {
		return nil, statusErr(rmqpb.Code_ILLEGAL_TOPIC, "topic %q is a retry topic and cannot be sent to", topic)
	}
	plan := &sendPlan{
		topic:    topic,
		kind:     messageKind(first),
		queueID:  first.GetSystemProperties().GetQueueId(),
		messages: make([]store.Message, 0, len(msgs)),
	}
	if len(msgs) == 1 {
		plan.group = first.GetSystemProperties().GetMessageGroup()
	}
	for _, m := range msgs {
		sm, err := decodeMessage(m, topic, lim, now, bornHost)
		if err != nil {
			return nil, err
		}
		// sysFlag is decided from message 0 only, as in the proxy.
		sm.Flags = messageFlags(first)
		plan.messages = append(plan.messages, sm)
	}
	return plan, nil
}

// messageKind infers the type of a message from its content.
func messageKind(m *rmqpb.Message) MessageType {
	sp := m.GetSystemProperties()
	switch {
	case sp.GetMessageType() == rmqpb.MessageType_TRANSACTION:
		return TypeTransaction
	case sp.GetDeliveryTimestamp() != nil:
		return TypeDelay
	case sp.GetMessageGroup() != "":
		return TypeFIFO
	}
	return TypeNormal
}

func messageFlags(m *rmqpb.Message) uint32 {
	var f uint32
	if m.GetSystemProperties().GetBodyEncoding() == rmqpb.Encoding_GZIP {
		f |= FlagCompressed
	}
	if m.GetSystemProperties().GetMessageType() == rmqpb.MessageType_TRANSACTION {
		f |= FlagTransactionPrepared
	}
	return f
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

func decodeMessage(m *rmqpb.Message, topic string, lim *Limits, now time.Time, bornHost string) (store.Message, error) {
	sp := m.GetSystemProperties()
	if sp == nil {
		// No system properties at all: fails below (no message id), with the
		// field-presence checks reading an empty value.
		sp = &rmqpb.SystemProperties{}
	}
	user := m.GetUserProperties()
	for k := range user {
		if isReservedKey(k) {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "property is used by system: %s", k)
		}
	}
	if strings.TrimSpace(sp.GetMessageId()) == "" {
		return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_ID, "message id is empty")
	}
	tag := sp.GetTag()
	if sp.Tag != nil {
		if strings.TrimSpace(tag) == "" {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
		}
		if strings.Contains(tag, "|") {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
		}
		if hasControl(tag) {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")
		}
	}
	size := len(tag)
	for _, k := range sp.GetKeys() {
		if strings.TrimSpace(k) == "" {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
		}
		if hasControl(k) {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
		}
		size += len(k)
	}
	if g := sp.GetMessageGroup(); sp.MessageGroup != nil && g != "" {
		if len(g) >= lim.MaxMessageGroupSize {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_GROUP, "message group length %d exceeds the limit %d", len(g), lim.MaxMessageGroupSize)
		}
		if hasControl(g) {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")
		}
	}
	if len(user) > lim.MaxUserProperties {
		return store.Message{}, statusErr(rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE, "too many user properties: %d, at most %d", len(user), lim.MaxUserProperties)
	}
	for k, v := range user {
		if hasControl(k) || hasControl(v) {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "property %q cannot contain control character", k)
		}
		size += len(k) + len(v)
	}
	if size > lim.MaxPropertiesSize {
		return store.Message{}, statusErr(rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE, "user properties size %d exceeds the limit %d", size, lim.MaxPropertiesSize)
	}
	body := m.GetBody()
	if len(body) == 0 {
		return store.Message{}, statusErr(rmqpb.Code_MESSAGE_BODY_EMPTY, "message body cannot be empty")
	}
	if len(body) > lim.MaxBodySize {
		return store.Message{}, statusErr(rmqpb.Code_MESSAGE_BODY_TOO_LARGE, "message body size %d exceeds the limit %d", len(body), lim.MaxBodySize)
	}
	props := make(map[string]string, len(user)+8)
	for k, v := range user {
		props[k] = v
	}
	if ts := sp.GetDeliveryTimestamp(); sp.DeliveryTimestamp != nil {
		if err := ts.CheckValid(); err != nil {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_DELIVERY_TIME, "delivery timestamp is invalid: %v", err)
		}
		at := ts.AsTime()
		if at.Sub(now) > lim.MaxDelay {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_DELIVERY_TIME, "delivery timestamp %s is more than %s ahead", at.UTC().Format(time.RFC3339), lim.MaxDelay)
		}
		props[propTimerDeliver] = strconv.FormatInt(at.UnixMilli(), 10)
	}
	if sp.GetMessageType() == rmqpb.MessageType_TRANSACTION {
		props[propTranMsg] = "true"
		rec := sp.GetOrphanedTransactionRecoveryDuration()
		if rec != nil {
			if err := rec.CheckValid(); err != nil || rec.AsDuration() > lim.MaxRecoveryDuration || rec.AsDuration() < 0 {
				return store.Message{}, statusErr(rmqpb.Code_BAD_REQUEST, "orphaned transaction recovery duration must be within [0, %s]", lim.MaxRecoveryDuration)
			}
		}
		props[propRecovery] = strconv.FormatInt(int64(rec.AsDuration()/time.Second), 10)
	}
	if len(sp.GetKeys()) > 0 {
		props[propKeys] = strings.Join(sp.GetKeys(), " ")
	}
	props[propUniqKey] = sp.GetMessageId()
	props[propProducerGroup] = topic
	if g := sp.GetMessageGroup(); g != "" {
		props[propShardingKey] = g
	}
	if tc := sp.GetTraceContext(); tc != "" {
		props[propTraceContext] = tc
	}
	born := now.UnixMilli()
	if bt := sp.GetBornTimestamp(); bt != nil && bt.IsValid() {
		born = bt.AsTime().UnixMilli()
	}
	host := sp.GetBornHost()
	if host == "" {
		host = bornHost
	}
	if !utf8.ValidString(host) {
		host = bornHost
	}
	return store.Message{
		Topic:          topic,
		BornTimestamp:  born,
		BornHost:       host,
		Tag:            tag,
		ReconsumeTimes: sp.GetDeliveryAttempt(),
		Properties:     props,
		Body:           body,
	}, nil
}

// checkInvisible validates a receive's invisible duration
// (ILLEGAL_INVISIBLE_TIME), with the proxy's bounds.
func checkInvisible(d time.Duration, min, max time.Duration) error {
	if d < min || d > max {
		return statusErr(rmqpb.Code_ILLEGAL_INVISIBLE_TIME, "the invisible time %s must be within [%s, %s]", d, min, max)
	}
	return nil
}
