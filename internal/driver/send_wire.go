package driver

import (
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/twinmq/twinmq/internal/pb/pbcodec"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Field numbers of apache.rocketmq.v2 (proto/apache/rocketmq/v2) and of
// the well-known Timestamp and Duration, for the messages a send writes.
const (
	fieldRequestMessages = 1 // SendMessageRequest.messages

	fieldMsgTopic      = 1 // Message.topic
	fieldMsgUserProps  = 2 // Message.user_properties
	fieldMsgSystemProp = 3 // Message.system_properties
	fieldMsgBody       = 4 // Message.body

	fieldMapKey   = 1 // map entry key
	fieldMapValue = 2 // map entry value

	fieldResNamespace = 1 // Resource.resource_namespace
	fieldResName      = 2 // Resource.name

	fieldSysTag            = 1  // SystemProperties.tag
	fieldSysKeys           = 2  // SystemProperties.keys
	fieldSysMessageID      = 3  // SystemProperties.message_id
	fieldSysBodyEncoding   = 5  // SystemProperties.body_encoding
	fieldSysMessageType    = 6  // SystemProperties.message_type
	fieldSysBornTimestamp  = 7  // SystemProperties.born_timestamp
	fieldSysBornHost       = 8  // SystemProperties.born_host
	fieldSysDeliveryTime   = 11 // SystemProperties.delivery_timestamp
	fieldSysQueueID        = 13 // SystemProperties.queue_id
	fieldSysMessageGroup   = 17 // SystemProperties.message_group
	fieldSysTraceContext   = 18 // SystemProperties.trace_context
	fieldSysOrphanRecovery = 19 // SystemProperties.orphaned_transaction_recovery_duration

	fieldSeconds = 1 // Timestamp.seconds, Duration.seconds
	fieldNanos   = 2 // Timestamp.nanos, Duration.nanos
)

// sendRequest is a validated SendMessage request that writes its own
// protobuf encoding (pbcodec.WireMessage): the batched send is one serial
// chain per batch, and building generated structs to hand them to the
// generic marshaller cost more than the encoding itself. Its bytes decode
// to the message the generated types would carry for the same send: every
// field the driver sets, proto3 defaults omitted, fields in number order,
// each user property as its own map entry (key and value always written,
// as the generated marshaller does; map order is unspecified in protobuf).
//
// It refers to the caller's messages without copying them; they must not
// change until Send returns (the codec encodes them during the call).
type sendRequest struct {
	msgs []*Message
	// ids are the message ids in order, generated where the caller left
	// them empty.
	ids       []string
	namespace string
	topic     string
	// hostname is the born host of messages that name none.
	hostname string
	// bornSec and bornNanos are the born time of messages that have none:
	// the time the request was built, shared by all of them.
	bornSec   int64
	bornNanos int32

	// sizes[2i] is the encoded length of message i, sizes[2i+1] that of its
	// system properties; measure fills them and size, the request's
	// length, so that AppendWire writes each length prefix without
	// measuring twice.
	sizes []int
	size  int
}

var _ pbcodec.WireMessage = (*sendRequest)(nil)

// prepareSend validates msgs into r (whose memory it reuses) and measures
// the request to send to endpoint. msgs is never modified.
func (c *Client) prepareSend(r *sendRequest, msgs []*Message, endpoint string, maxBody int) error {
	if err := c.fillSend(r, msgs, endpoint, maxBody); err != nil {
		return err
	}
	r.measure()
	return nil
}

// fillSend is the one validation of a send: it checks msgs, assigns the
// ids and fixes the born time, into r (whose slices it reuses). The clock
// is read once: it stamps the generated ids and is the born time of the
// messages without their own.
func (c *Client) fillSend(r *sendRequest, msgs []*Message, endpoint string, maxBody int) error {
	const rpc = "SendMessage"
	if len(msgs) == 0 {
		return clientError(ErrBadRequest, rpc, endpoint, "no message to send")
	}
	now := time.Now()
	*r = sendRequest{
		msgs:      msgs,
		ids:       slices.Grow(r.ids[:0], len(msgs))[:len(msgs)],
		namespace: c.cfg.Namespace,
		hostname:  c.hostname,
		bornSec:   now.Unix(),
		bornNanos: int32(now.Nanosecond()),
		sizes:     r.sizes[:0],
	}
	for i, m := range msgs {
		if m == nil {
			return clientError(ErrBadRequest, rpc, endpoint, "message %d is nil", i)
		}
		if i == 0 {
			r.topic = m.Topic
			if strings.TrimSpace(r.topic) == "" {
				return clientError(ErrBadRequest, rpc, endpoint, "message 0 has no topic")
			}
		} else if m.Topic != r.topic {
			return clientError(ErrBadRequest, rpc, endpoint,
				"message %d has topic %q, but a request carries one topic (%q)", i, m.Topic, r.topic)
		}
		if len(m.Body) == 0 {
			return clientError(ErrBadRequest, rpc, endpoint, "message %d has an empty body", i)
		}
		if maxBody > 0 && len(m.Body) > maxBody {
			return clientError(ErrTooLarge, rpc, endpoint,
				"message %d body is %d bytes, the server accepts at most %d", i, len(m.Body), maxBody)
		}
		if m.Transactional && (m.Group != "" || !m.DeliveryTime.IsZero()) {
			return clientError(ErrBadRequest, rpc, endpoint,
				"message %d: a transactional message can have neither a message group nor a delivery time", i)
		}
		if m.Transactional && len(msgs) > 1 {
			return clientError(ErrBadRequest, rpc, endpoint, "transactional messages are sent one per request")
		}
		// Protobuf strings are UTF-8; a server's parser rejects the whole
		// request otherwise, so say which field before sending.
		if field := invalidUTF8Field(m, i == 0); field != "" {
			return clientError(ErrBadRequest, rpc, endpoint, "message %d: %s is not valid UTF-8", i, field)
		}
		r.ids[i] = m.ID
	}
	c.ids.fillEmpty(r.ids, now)
	return nil
}

// invalidUTF8Field names the first string field of m that is not valid
// UTF-8, or returns "". The topic is checked on the first message only:
// the others must equal it.
func invalidUTF8Field(m *Message, withTopic bool) string {
	switch {
	case withTopic && !utf8.ValidString(m.Topic):
		return "topic"
	case !utf8.ValidString(m.Tag):
		return "tag"
	case !utf8.ValidString(m.ID):
		return "id"
	case !utf8.ValidString(m.Group):
		return "group"
	case !utf8.ValidString(m.TraceContext):
		return "trace context"
	case !utf8.ValidString(m.BornHost):
		return "born host"
	}
	for _, k := range m.Keys {
		if !utf8.ValidString(k) {
			return "a key"
		}
	}
	if len(m.Properties) == 0 {
		return "" // a map iterator costs, even over an empty map
	}
	for k, v := range m.Properties {
		if !utf8.ValidString(k) {
			return "a property name"
		}
		if !utf8.ValidString(v) {
			return "property " + strconv.Quote(truncate(k, 64))
		}
	}
	return ""
}

// measure computes the encoded lengths AppendWire needs.
func (r *sendRequest) measure() {
	r.sizes = slices.Grow(r.sizes[:0], 2*len(r.msgs))[:2*len(r.msgs)]
	topic := r.resourceSize()
	total := 0
	for i, m := range r.msgs {
		sp := r.systemPropertiesSize(i)
		n := sizeLen(fieldMsgTopic, topic) + sizeLen(fieldMsgSystemProp, sp) + sizeLen(fieldMsgBody, len(m.Body))
		if len(m.Properties) > 0 {
			for k, v := range m.Properties {
				n += sizeLen(fieldMsgUserProps, mapEntrySize(k, v))
			}
		}
		r.sizes[2*i] = n
		r.sizes[2*i+1] = sp
		total += sizeLen(fieldRequestMessages, n)
	}
	r.size = total
}

// WireSize returns the request's encoded length.
func (r *sendRequest) WireSize() int { return r.size }

// AppendWire appends the encoded SendMessageRequest to b.
func (r *sendRequest) AppendWire(b []byte) []byte {
	topic := r.resourceSize()
	for i, m := range r.msgs {
		b = appendTagLen(b, fieldRequestMessages, r.sizes[2*i])
		b = appendTagLen(b, fieldMsgTopic, topic)
		b = appendString(b, fieldResNamespace, r.namespace)
		b = appendString(b, fieldResName, r.topic)
		if len(m.Properties) > 0 {
			for k, v := range m.Properties {
				b = appendTagLen(b, fieldMsgUserProps, mapEntrySize(k, v))
				b = appendStringAlways(b, fieldMapKey, k)
				b = appendStringAlways(b, fieldMapValue, v)
			}
		}
		b = appendTagLen(b, fieldMsgSystemProp, r.sizes[2*i+1])
		b = r.appendSystemProperties(b, i)
		b = appendTagLen(b, fieldMsgBody, len(m.Body))
		b = append(b, m.Body...)
	}
	return b
}

func (r *sendRequest) resourceSize() int {
	return sizeString(fieldResNamespace, r.namespace) + sizeString(fieldResName, r.topic)
}

// bornHost and bornTime are the born host and time sent for m.
func (r *sendRequest) bornHost(m *Message) string {
	if m.BornHost == "" {
		return r.hostname
	}
	return m.BornHost
}

func (r *sendRequest) bornTime(m *Message) (int64, int32) {
	if m.BornTime.IsZero() {
		return r.bornSec, r.bornNanos
	}
	return m.BornTime.Unix(), int32(m.BornTime.Nanosecond())
}

// orphanRecovery is the orphaned-transaction recovery duration of m as
// (seconds, nanos), and whether it is sent.
func orphanRecovery(m *Message) (int64, int32, bool) {
	if !m.Transactional || m.OrphanRecovery <= 0 {
		return 0, 0, false
	}
	d := m.OrphanRecovery
	return int64(d / time.Second), int32(d % time.Second), true
}

func (r *sendRequest) systemPropertiesSize(i int) int {
	m := r.msgs[i]
	n := 0
	if m.Tag != "" {
		n += sizeLen(fieldSysTag, len(m.Tag))
	}
	for _, k := range m.Keys {
		n += sizeLen(fieldSysKeys, len(k))
	}
	n += sizeString(fieldSysMessageID, r.ids[i])
	n += sizeVarint(fieldSysBodyEncoding, uint64(rmqpb.Encoding_IDENTITY))
	n += sizeVarint(fieldSysMessageType, uint64(m.Type()))
	sec, nanos := r.bornTime(m)
	n += sizeLen(fieldSysBornTimestamp, timeSize(sec, nanos))
	n += sizeString(fieldSysBornHost, r.bornHost(m))
	if !m.DeliveryTime.IsZero() {
		n += sizeLen(fieldSysDeliveryTime, timeSize(m.DeliveryTime.Unix(), int32(m.DeliveryTime.Nanosecond())))
	}
	n += sizeVarint(fieldSysQueueID, uint64(m.QueueID))
	if m.Group != "" {
		n += sizeLen(fieldSysMessageGroup, len(m.Group))
	}
	if m.TraceContext != "" {
		n += sizeLen(fieldSysTraceContext, len(m.TraceContext))
	}
	if sec, nanos, ok := orphanRecovery(m); ok {
		n += sizeLen(fieldSysOrphanRecovery, timeSize(sec, nanos))
	}
	return n
}

func (r *sendRequest) appendSystemProperties(b []byte, i int) []byte {
	m := r.msgs[i]
	if m.Tag != "" {
		b = appendStringAlways(b, fieldSysTag, m.Tag)
	}
	for _, k := range m.Keys {
		b = appendStringAlways(b, fieldSysKeys, k)
	}
	b = appendString(b, fieldSysMessageID, r.ids[i])
	b = appendVarint(b, fieldSysBodyEncoding, uint64(rmqpb.Encoding_IDENTITY))
	b = appendVarint(b, fieldSysMessageType, uint64(m.Type()))
	sec, nanos := r.bornTime(m)
	b = appendTime(b, fieldSysBornTimestamp, sec, nanos)
	b = appendString(b, fieldSysBornHost, r.bornHost(m))
	if !m.DeliveryTime.IsZero() {
		b = appendTime(b, fieldSysDeliveryTime, m.DeliveryTime.Unix(), int32(m.DeliveryTime.Nanosecond()))
	}
	b = appendVarint(b, fieldSysQueueID, uint64(m.QueueID))
	if m.Group != "" {
		b = appendStringAlways(b, fieldSysMessageGroup, m.Group)
	}
	if m.TraceContext != "" {
		b = appendStringAlways(b, fieldSysTraceContext, m.TraceContext)
	}
	if sec, nanos, ok := orphanRecovery(m); ok {
		b = appendTime(b, fieldSysOrphanRecovery, sec, nanos)
	}
	return b
}

// The helpers below write proto3 fields: sizeString/appendString and
// sizeVarint/appendVarint omit the zero value (implicit presence), the
// others always write. Signed values are passed as uint64 of their
// sign-extended int64, as protobuf encodes int32 and int64.

func sizeLen(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return sizeLen(num, len(s))
}

func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func mapEntrySize(k, v string) int {
	return sizeLen(fieldMapKey, len(k)) + sizeLen(fieldMapValue, len(v))
}

// timeSize is the length of a Timestamp or Duration.
func timeSize(sec int64, nanos int32) int {
	return sizeVarint(fieldSeconds, uint64(sec)) + sizeVarint(fieldNanos, uint64(int64(nanos)))
}

// appendUvarint is protowire.AppendVarint with the one-byte case inlined:
// every tag of a send but three, and most lengths, fit in one byte.
func appendUvarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	return appendUvarint(b, uint64(num)<<3|uint64(typ))
}

func appendTagLen(b []byte, num protowire.Number, n int) []byte {
	b = appendTag(b, num, protowire.BytesType)
	return appendUvarint(b, uint64(n))
}

func appendStringAlways(b []byte, num protowire.Number, s string) []byte {
	b = appendTagLen(b, num, len(s))
	return append(b, s...)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendStringAlways(b, num, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, num, protowire.VarintType)
	return appendUvarint(b, v)
}

// appendTime writes a Timestamp or Duration message field (always
// present, possibly empty).
func appendTime(b []byte, num protowire.Number, sec int64, nanos int32) []byte {
	b = appendTagLen(b, num, timeSize(sec, nanos))
	b = appendVarint(b, fieldSeconds, uint64(sec))
	return appendVarint(b, fieldNanos, uint64(int64(nanos)))
}

// sendCall is the memory of one Send, recycled by the client: the request
// and the decoded answer. Send keeps nothing of either once it returns
// (results copy the ids and entries they need).
type sendCall struct {
	req  sendRequest
	resp sendResponse
}

func (c *Client) getSendCall() *sendCall {
	if sc, ok := c.sendCalls.Get().(*sendCall); ok {
		return sc
	}
	return new(sendCall)
}

// putSendCall recycles sc, keeping no reference to the caller's messages
// or strings. An unusually large call is dropped instead.
func (c *Client) putSendCall(sc *sendCall) {
	if cap(sc.req.ids) > maxPooledSend || cap(sc.resp.entries) > maxPooledSend {
		return
	}
	clear(sc.req.ids[:cap(sc.req.ids)])
	clear(sc.resp.entries[:cap(sc.resp.entries)])
	sc.req = sendRequest{ids: sc.req.ids[:0], sizes: sc.req.sizes[:0]}
	sc.resp = sendResponse{sendAnswer: sendAnswer{entries: sc.resp.entries[:0]}}
	c.sendCalls.Put(sc)
}

// maxPooledSend bounds the messages of a recycled sendCall.
const maxPooledSend = 1024
