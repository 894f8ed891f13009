package broker

import (
	"slices"
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

// decodeSend validates a generated send request (see sendMsgsOf) with the
// proxy's rules and codes and converts its messages. It reads nothing but its
// arguments, so it can be fuzzed. bornHost is the peer address, used when a
// message names none.
func decodeSend(req *rmqpb.SendMessageRequest, lim *Limits, now time.Time, bornHost string) (*sendPlan, error) {
	return planSend(sendMsgsOf(req), nil, lim, now, bornHost)
}

// planSend is the one validation of a send request, whichever decoder read
// it: the proxy's rules and codes, checked in the proxy's order, and the
// conversion to store messages. The store messages share the bodies of msgs.
//
// With a scratch (nil allocates), the plan's messages reuse its memory and
// stay valid until the scratch is reset. So do the property maps of a
// normal or FIFO request, which goes to store.Append and is copied there;
// a transactional or delayed message is held by the broker beyond the
// request, so its map is always its own.
func planSend(msgs []sendMsg, sc *sendScratch, lim *Limits, now time.Time, bornHost string) (*sendPlan, error) {
	if len(msgs) == 0 {
		return nil, statusErr(rmqpb.Code_MESSAGE_CORRUPTED, "no message to send")
	}
	first := &msgs[0]
	topic, ns := first.topic, first.namespace
	for i := range msgs[1:] {
		if m := &msgs[1+i]; m.topic != topic || m.namespace != ns {
			return nil, statusErr(rmqpb.Code_MESSAGE_CORRUPTED, "topic in message is not same")
		}
	}
	if err := checkTopicName(topic); err != nil {
		return nil, statusErr(rmqpb.Code_ILLEGAL_TOPIC, "topic %q is illegal: %v", topic, err)
	}
	if strings.HasPrefix(topic, retryPrefix) {
		return nil, statusErr(rmqpb.Code_ILLEGAL_TOPIC, "topic %q is a retry topic and cannot be sent to", topic)
	}
	var into []store.Message
	if sc != nil {
		into = sc.stored
	}
	plan := &sendPlan{
		topic:    topic,
		kind:     first.kind(),
		queueID:  first.queueID,
		messages: slices.Grow(into[:0], len(msgs)),
	}
	reuse := sc != nil && (plan.kind == TypeNormal || plan.kind == TypeFIFO)
	if len(msgs) == 1 {
		plan.group = first.group
	}
	// sysFlag is decided from message 0 only, as in the proxy.
	flags := first.flags()
	for i := range msgs {
		var props map[string]string
		if reuse {
			props = sc.propMap(i)
		}
		sm, err := checkMessage(&msgs[i], props, topic, lim, now, bornHost)
		if err != nil {
			return nil, err
		}
		sm.Flags = flags
		plan.messages = append(plan.messages, sm)
	}
	if sc != nil {
		sc.stored = plan.messages
	}
	return plan, nil
}

// kind infers the type of a message from its content, as the proxy does:
// TRANSACTION > DELAY > FIFO > NORMAL.
func (m *sendMsg) kind() MessageType {
	switch {
	case m.messageType == rmqpb.MessageType_TRANSACTION:
		return TypeTransaction
	case m.delivery.set:
		return TypeDelay
	case m.group != "":
		return TypeFIFO
	}
	return TypeNormal
}

func (m *sendMsg) flags() uint32 {
	var f uint32
	if m.bodyEncoding == rmqpb.Encoding_GZIP {
		f |= FlagCompressed
	}
	if m.messageType == rmqpb.MessageType_TRANSACTION {
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

// systemProps is the number of properties checkMessage adds to the user's,
// so that the map is made at its size: a map made for more than 8 entries
// takes several times the memory of one made for up to 8, the common case.
func (m *sendMsg) systemProps() int {
	n := 2 // propUniqKey, propProducerGroup
	if len(m.keys) > 0 {
		n++
	}
	if m.group != "" {
		n++
	}
	if m.traceContext != "" {
		n++
	}
	if m.delivery.set {
		n++
	}
	if m.messageType == rmqpb.MessageType_TRANSACTION {
		n += 2
	}
	return n
}

// checkMessage validates one message and converts it, its properties into
// props (an empty map; nil makes one). A message without system properties
// fails (no message id), with the field-presence checks reading empty
// values.
func checkMessage(m *sendMsg, props map[string]string, topic string, lim *Limits, now time.Time, bornHost string) (store.Message, error) {
	// The user properties go into the message's property map first: on the
	// wire a later entry of a key replaces an earlier one, so the checks
	// below look at the distinct keys with their last values, as the proxy
	// (which reads a map) does. props is an empty map to fill, or nil.
	if props == nil {
		props = make(map[string]string, len(m.user)+m.systemProps())
	}
	for _, p := range m.user {
		props[p.key] = p.value
	}
	user := m.user
	if len(props) != len(user) {
		// A key came more than once; the checks look at the last value of
		// each, which the map holds.
		user = make([]userProp, 0, len(props))
		for k, v := range props {
			user = append(user, userProp{key: k, value: v})
		}
	}
	for _, p := range user {
		if isReservedKey(p.key) {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "property is used by system: %s", p.key)
		}
	}
	if strings.TrimSpace(m.messageID) == "" {
		return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_ID, "message id is empty")
	}
	tag := m.tag
	if m.hasTag {
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
	for _, k := range m.keys {
		if strings.TrimSpace(k) == "" {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
		}
		if hasControl(k) {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
		}
		size += len(k)
	}
	if g := m.group; g != "" {
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
	for _, p := range user {
		if hasControl(p.key) || hasControl(p.value) {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "property %q cannot contain control character", p.key)
		}
		size += len(p.key) + len(p.value)
	}
	if size > lim.MaxPropertiesSize {
		return store.Message{}, statusErr(rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE, "user properties size %d exceeds the limit %d", size, lim.MaxPropertiesSize)
	}
	body := m.body
	if len(body) == 0 {
		return store.Message{}, statusErr(rmqpb.Code_MESSAGE_BODY_EMPTY, "message body cannot be empty")
	}
	if len(body) > lim.MaxBodySize {
		return store.Message{}, statusErr(rmqpb.Code_MESSAGE_BODY_TOO_LARGE, "message body size %d exceeds the limit %d", len(body), lim.MaxBodySize)
	}
	if m.delivery.set {
		ts := m.delivery.timestamp()
		if err := ts.CheckValid(); err != nil {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_DELIVERY_TIME, "delivery timestamp is invalid: %v", err)
		}
		at := ts.AsTime()
		if at.Sub(now) > lim.MaxDelay {
			return store.Message{}, statusErr(rmqpb.Code_ILLEGAL_DELIVERY_TIME, "delivery timestamp %s is more than %s ahead", at.UTC().Format(time.RFC3339), lim.MaxDelay)
		}
		props[propTimerDeliver] = strconv.FormatInt(at.UnixMilli(), 10)
	}
	if m.messageType == rmqpb.MessageType_TRANSACTION {
		props[propTranMsg] = "true"
		var rec time.Duration
		if m.recovery.set {
			d := m.recovery.duration()
			if err := d.CheckValid(); err != nil || d.AsDuration() > lim.MaxRecoveryDuration || d.AsDuration() < 0 {
				return store.Message{}, statusErr(rmqpb.Code_BAD_REQUEST, "orphaned transaction recovery duration must be within [0, %s]", lim.MaxRecoveryDuration)
			}
			rec = d.AsDuration()
		}
		props[propRecovery] = strconv.FormatInt(int64(rec/time.Second), 10)
	}
	if len(m.keys) > 0 {
		props[propKeys] = strings.Join(m.keys, " ")
	}
	props[propUniqKey] = m.messageID
	props[propProducerGroup] = topic
	if g := m.group; g != "" {
		props[propShardingKey] = g
	}
	if tc := m.traceContext; tc != "" {
		props[propTraceContext] = tc
	}
	born := now.UnixMilli()
	if ms, ok := m.born.unixMilli(); ok {
		born = ms
	}
	host := m.bornHost
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
		ReconsumeTimes: m.deliveryAttempt,
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
