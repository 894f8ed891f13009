package broker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/twinmq/twinmq/internal/pb/pbcodec"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/store"
)

// ErrMalformedSend: the bytes of a SendMessageRequest are not a valid
// protobuf encoding of one (truncated, a bad tag or length, a string that is
// not UTF-8). Whatever proto.Unmarshal refuses, the wire decoder refuses;
// gRPC answers the call with status INTERNAL, as for any request its codec
// cannot decode.
var ErrMalformedSend = errors.New("broker: malformed SendMessageRequest")

// Field numbers of apache.rocketmq.v2 (proto/apache/rocketmq/v2).
const (
	fieldRequestMessages = 1 // SendMessageRequest.messages

	fieldMessageTopic    = 1 // Message.topic (Resource)
	fieldMessageUser     = 2 // Message.user_properties (map<string,string>)
	fieldMessageSystem   = 3 // Message.system_properties
	fieldMessageBody     = 4 // Message.body
	fieldResourceNS      = 1 // Resource.resource_namespace
	fieldResourceName    = 2 // Resource.name
	fieldMapKey          = 1 // map entry key
	fieldMapValue        = 2 // map entry value
	fieldSeconds         = 1 // Timestamp/Duration.seconds
	fieldNanos           = 2 // Timestamp/Duration.nanos
	fieldDigestChecksum  = 2 // Digest.checksum
	fieldDeadLetterTopic = 1 // DeadLetterQueue.topic
	fieldDeadLetterID    = 2 // DeadLetterQueue.message_id
)

// SystemProperties field numbers.
const (
	spTag               = 1
	spKeys              = 2
	spMessageID         = 3
	spBodyDigest        = 4
	spBodyEncoding      = 5
	spMessageType       = 6
	spBornTimestamp     = 7
	spBornHost          = 8
	spStoreTimestamp    = 9
	spStoreHost         = 10
	spDeliveryTimestamp = 11
	spReceiptHandle     = 12
	spQueueID           = 13
	spQueueOffset       = 14
	spInvisible         = 15
	spDeliveryAttempt   = 16
	spMessageGroup      = 17
	spTraceContext      = 18
	spRecovery          = 19
	spDeadLetterQueue   = 20
)

// sendRequest is a SendMessageRequest decoded by the broker itself, the
// hot path of batched production: gRPC's codec hands it the received bytes
// (pbcodec.BufferUnmarshaler) and it reads them with protowire straight
// into the form validation reads, keeping the message bodies as views of
// the buffer instead of copying each into a generated struct. The store
// copies the bodies when it appends them; release gives the buffer back
// after that.
type sendRequest struct {
	// pool recycles the scratch between requests (the service's); nil
	// allocates a new one for each request.
	pool    *sync.Pool
	scratch *sendScratch
	buf     mem.Buffer // the received bytes; nil once released
	msgs    []sendMsg
}

// sendScratch is the memory of one decoded request that dies with it: the
// messages in validation's form, and the user properties and keys they
// hold windows of. A service recycles it, since a batch of 64 messages
// needs some 20 KiB of it.
type sendScratch struct {
	msgs  []sendMsg
	props []userProp
	keys  []string
	// stored holds the store messages of the request's plan, and maps
	// the property maps of the ordinary ones among them (see planSend).
	stored []store.Message
	maps   []map[string]string
}

// maxPooled bounds the scratch a pool keeps (messages, or properties or
// keys): an unusual request of many does not pin its memory.
const maxPooled = 4096

func (sc *sendScratch) small() bool {
	return cap(sc.msgs) <= maxPooled && cap(sc.props) <= maxPooled && cap(sc.keys) <= maxPooled
}

// reset forgets a request: nothing it referred to (strings, bodies in a
// freed buffer) stays reachable from the pool.
func (sc *sendScratch) reset() {
	clear(sc.msgs)
	clear(sc.props)
	clear(sc.keys)
	clear(sc.stored[:cap(sc.stored)])
	sc.msgs, sc.props, sc.keys, sc.stored = sc.msgs[:0], sc.props[:0], sc.keys[:0], sc.stored[:0]
	// A map keeps its memory when cleared; one that held an unusual
	// number of properties is let go rather than kept at that size.
	maps := sc.maps[:0]
	for _, m := range sc.maps {
		if len(m) <= pooledProps {
			clear(m)
			maps = append(maps, m)
		}
	}
	clear(sc.maps[len(maps):])
	sc.maps = maps
}

// pooledProps is the most properties a recycled property map held: up to
// 8 entries a map is one group of slots.
const pooledProps = 8

// UnmarshalBuffer implements pbcodec.BufferUnmarshaler. It owns buf from
// here on: on success until release, on failure it frees it at once.
func (r *sendRequest) UnmarshalBuffer(buf mem.Buffer) error {
	r.release()
	if r.pool != nil {
		r.scratch, _ = r.pool.Get().(*sendScratch)
	}
	if r.scratch == nil {
		r.scratch = new(sendScratch)
	}
	msgs, err := decodeSendWire(buf.ReadOnlyData(), r.scratch)
	if err != nil {
		buf.Free()
		r.release()
		return err
	}
	r.buf, r.msgs = buf, msgs
	return nil
}

// release gives the received bytes back to the codec's pool and the
// scratch to the service's. The bodies of msgs are views of the bytes, so
// they go too; call it when the send is done (stored, held or refused).
// Calling it again does nothing.
func (r *sendRequest) release() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
	r.msgs = nil
	if sc := r.scratch; sc != nil {
		r.scratch = nil
		sc.reset()
		if r.pool != nil && sc.small() {
			r.pool.Put(sc)
		}
	}
}

// plan validates the request (planSend) into the scratch's store messages.
func (r *sendRequest) plan(lim *Limits, now time.Time, bornHost string) (*sendPlan, error) {
	return planSend(r.msgs, r.scratch, lim, now, bornHost)
}

// PublishTopic is the topic the request publishes to (message 0's), for the
// ACL check of package auth; false when the request has no message.
func (r *sendRequest) PublishTopic() (string, bool) {
	if len(r.msgs) == 0 {
		return "", false
	}
	return r.msgs[0].topic, true
}

// wireDecoder reads one request into a scratch. The strings the broker
// keeps are copied into one arena per request (a strings.Builder grown
// once to a bound of their total size) instead of one allocation each; the
// user properties and keys of all messages share one slice each, every
// message holding its own window of it.
type wireDecoder struct {
	arena strings.Builder
	*sendScratch
}

// malformed wraps ErrMalformedSend with what was wrong.
func malformed(what string) error {
	return fmt.Errorf("%w: %s", ErrMalformedSend, what)
}

var errTruncated = malformed("truncated or invalid field")

// decodeSendWire decodes the encoding of a SendMessageRequest with protobuf
// semantics (fields in any order, unknown fields skipped, repeated messages
// appended, repeated occurrences of a singular message merged, the last
// value of a scalar kept, strings checked for UTF-8 as proto3 requires).
// The messages are sc's, which must be empty.
func decodeSendWire(b []byte, sc *sendScratch) ([]sendMsg, error) {
	var sh shape
	if err := sh.scanRequest(b); err != nil {
		return nil, err
	}
	if sh.messages == 0 {
		return nil, nil
	}
	sc.msgs = slices.Grow(sc.msgs, sh.messages)
	sc.props = slices.Grow(sc.props, sh.entries)
	d := wireDecoder{sendScratch: sc}
	// Every string kept is a distinct part of a message's topic, user
	// properties or system properties, so the arena never grows again.
	d.arena.Grow(sh.strs)
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == fieldRequestMessages && typ == protowire.BytesType {
			return d.message(v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d.msgs, nil
}

// fields walks the fields of one message encoding. A length-delimited
// field is handed over as its content, a varint as its encoding; a field of
// another wire type (fixed, group) is checked and skipped, with nothing the
// send request's messages know under such a type. It fails on anything
// proto.Unmarshal fails on at this level: a bad tag or field number, a
// truncated value, an end-group without its start.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := pbcodec.ConsumeTag(b)
		if n < 0 {
			return errTruncated
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			_, n = protowire.ConsumeVarint(b)
			if n > 0 {
				v = b[:n]
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errTruncated
		}
		b = b[n:]
		if v == nil && typ != protowire.BytesType {
			continue
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// varint decodes a varint field handed over by fields (already checked).
func varint(v []byte) uint64 {
	x, _ := protowire.ConsumeVarint(v)
	return x
}

// utf8Str checks a proto3 string field, as proto.Unmarshal does.
func utf8Str(v []byte, what string) error {
	if !utf8.Valid(v) {
		return malformed(what + " is not valid UTF-8")
	}
	return nil
}

// shape is what a first, shallow pass over a request learns, to size the
// decoder's allocations: the number of messages and of user property
// entries, and the bytes of the fields that hold the strings it keeps.
type shape struct {
	messages, entries, strs int
}

// scanRequest walks the request and its messages' top-level fields. The
// framing errors it reports are errors for proto.Unmarshal too.
func (s *shape) scanRequest(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != fieldRequestMessages || typ != protowire.BytesType {
			return nil
		}
		s.messages++
		return fields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if typ != protowire.BytesType {
				return nil
			}
			switch num {
			case fieldMessageTopic, fieldMessageSystem:
				s.strs += len(v)
			case fieldMessageUser:
				s.strs += len(v)
				s.entries++
			}
			return nil
		})
	})
}

// str copies b into the arena and returns it as a string of its own.
func (d *wireDecoder) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	start := d.arena.Len()
	d.arena.Write(b)
	return d.arena.String()[start:]
}

// intern is str, sharing s when b holds the same bytes: every message of a
// request names message 0's topic.
func (d *wireDecoder) intern(b []byte, s string) string {
	if string(b) == s {
		return s
	}
	return d.str(b)
}

// message decodes one Message and appends it.
func (d *wireDecoder) message(b []byte) error {
	d.msgs = append(d.msgs, sendMsg{})
	m := &d.msgs[len(d.msgs)-1]
	props, keys := len(d.props), len(d.keys)
	var ns, name []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldMessageTopic:
			// Every occurrence of a singular message field merges into
			// the one before.
			return resource(v, &ns, &name)
		case fieldMessageUser:
			return d.userEntry(v)
		case fieldMessageSystem:
			return d.system(v, m)
		case fieldMessageBody:
			m.body = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(d.msgs) > 1 {
		m.topic, m.namespace = d.intern(name, d.msgs[0].topic), d.intern(ns, d.msgs[0].namespace)
	} else {
		m.topic, m.namespace = d.str(name), d.str(ns)
	}
	if len(d.props) > props {
		m.user = d.props[props:len(d.props):len(d.props)]
	}
	if len(d.keys) > keys {
		m.keys = d.keys[keys:len(d.keys):len(d.keys)]
	}
	return nil
}

// resource decodes a Resource into views of its fields.
func resource(b []byte, ns, name *[]byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldResourceNS:
			*ns = v
		case fieldResourceName:
			*name = v
		default:
			return nil
		}
		return utf8Str(v, "resource")
	})
}

// userEntry decodes one entry of the user_properties map. A missing key or
// value is the empty string.
func (d *wireDecoder) userEntry(b []byte) error {
	var key, value []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldMapKey:
			key = v
		case fieldMapValue:
			value = v
		default:
			return nil
		}
		return utf8Str(v, "user property")
	})
	if err != nil {
		return err
	}
	d.props = append(d.props, userProp{key: d.str(key), value: d.str(value)})
	return nil
}

// system decodes a SystemProperties into m, merging with what an earlier
// occurrence set. Fields the broker does not use are still checked as
// proto.Unmarshal checks them.
func (d *wireDecoder) system(b []byte, m *sendMsg) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ == protowire.VarintType {
			switch num {
			case spBodyEncoding:
				m.bodyEncoding = rmqpb.Encoding(int32(varint(v)))
			case spMessageType:
				m.messageType = rmqpb.MessageType(int32(varint(v)))
			case spQueueID:
				m.queueID = int32(varint(v))
			case spDeliveryAttempt:
				m.deliveryAttempt = int32(varint(v))
			}
			return nil
		}
		switch num {
		case spTag, spKeys, spMessageID, spBornHost, spStoreHost, spReceiptHandle, spMessageGroup, spTraceContext:
			if err := utf8Str(v, "system property"); err != nil {
				return err
			}
		}
		switch num {
		case spTag:
			m.hasTag, m.tag = true, d.str(v)
		case spKeys:
			d.keys = append(d.keys, d.str(v))
		case spMessageID:
			m.messageID = d.str(v)
		case spBornHost:
			m.bornHost = d.str(v)
		case spMessageGroup:
			m.group = d.str(v)
		case spTraceContext:
			m.traceContext = d.str(v)
		case spBornTimestamp:
			return timeFields(v, &m.born)
		case spDeliveryTimestamp:
			return timeFields(v, &m.delivery)
		case spRecovery:
			return timeFields(v, &m.recovery)
		case spStoreTimestamp, spInvisible:
			var unused pbTime
			return timeFields(v, &unused)
		case spBodyDigest:
			return checkStrings(v, fieldDigestChecksum, 0)
		case spDeadLetterQueue:
			return checkStrings(v, fieldDeadLetterTopic, fieldDeadLetterID)
		}
		return nil
	})
}

// timeFields decodes a Timestamp or Duration into t, merging.
func timeFields(b []byte, t *pbTime) error {
	t.set = true
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.VarintType {
			return nil
		}
		switch num {
		case fieldSeconds:
			t.seconds = int64(varint(v))
		case fieldNanos:
			t.nanos = int32(varint(v))
		}
		return nil
	})
}

// checkStrings checks a message the broker does not use whose string
// fields are a and c (0: none).
func checkStrings(b []byte, a, c protowire.Number) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ == protowire.BytesType && (num == a || num == c) {
			return utf8Str(v, "string field")
		}
		return nil
	})
}

// propMap returns the i-th recycled property map, empty, making it first
// if the scratch has fewer.
func (sc *sendScratch) propMap(i int) map[string]string {
	for len(sc.maps) <= i {
		sc.maps = append(sc.maps, make(map[string]string, pooledProps))
	}
	return sc.maps[i]
}
