package broker

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// The generators of the differential tests: random generated requests
// covering every field of the send path, set and unset, valid and not, and
// a rewriter of their encoding that produces what proto.Marshal never does
// but a peer may send: fields out of order, singular messages split into
// several occurrences, scalars sent twice, unknown fields of every wire
// type, known numbers under the wrong wire type.

// genNow is the clock of the differential tests.
func genNow() time.Time { return time.Unix(1700000000, 0) }

// genLimits are the default limits with a small body limit, so that a body
// too large is cheap to generate.
func genLimits() *Limits {
	l := defaultLimits()
	l.MaxBodySize = 2048
	return l
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// choose is one of good, or once in a while one of bad: a request has
// dozens of fields, and most requests must pass validation for the
// comparison of the plans to mean something.
func choose[T any](r *rand.Rand, good []T, bad ...T) T {
	if len(bad) > 0 && r.IntN(120) == 0 {
		return pick(r, bad...)
	}
	return pick(r, good...)
}

func genRequest(r *rand.Rand, maxMsgs int) *rmqpb.SendMessageRequest {
	req := &rmqpb.SendMessageRequest{}
	n := choose(r, []int{1 + r.IntN(maxMsgs)}, 0)
	topic := choose(r, []string{"normal", "fifo", "delay", "tx", "mixed"}, "bad/topic", "%RETRY%g1", "")
	ns := pick(r, "", "", "ns1")
	for i := range n {
		m := genMessage(r, i)
		if r.IntN(100) != 0 {
			m.Topic = &rmqpb.Resource{Name: topic, ResourceNamespace: ns}
		} else {
			m.Topic = pick(r, nil, &rmqpb.Resource{Name: "other", ResourceNamespace: ns}, &rmqpb.Resource{Name: topic, ResourceNamespace: "ns2"})
		}
		req.Messages = append(req.Messages, m)
	}
	return req
}

func genMessage(r *rand.Rand, i int) *rmqpb.Message {
	m := &rmqpb.Message{
		Body: choose(r, [][]byte{[]byte(strings.Repeat(string(rune('a'+i%26)), 1+r.IntN(1500)))}, nil, []byte{}, make([]byte, 2049)),
	}
	if r.IntN(3) == 0 {
		m.UserProperties = map[string]string{}
		for range r.IntN(5) {
			m.UserProperties[choose(r, []string{"lane", "k1", "k2", ""}, "UNIQ_KEY", "ctl\x01")] =
				choose(r, []string{"v", "", "a.b", strings.Repeat("v", 300)}, "x\ty")
		}
	}
	if r.IntN(100) == 0 {
		return m
	}
	sp := &rmqpb.SystemProperties{
		MessageId:    choose(r, []string{fmt.Sprintf("id-%d", i), fmt.Sprintf("01ABCDEF-%04d", i)}, "", " "),
		BodyEncoding: pick(r, rmqpb.Encoding_IDENTITY, rmqpb.Encoding_GZIP, rmqpb.Encoding_ENCODING_UNSPECIFIED, rmqpb.Encoding(77)),
		MessageType:  pick(r, rmqpb.MessageType_NORMAL, rmqpb.MessageType_FIFO, rmqpb.MessageType_DELAY, rmqpb.MessageType_TRANSACTION, rmqpb.MessageType(-3)),
		BornHost:     pick(r, "", "10.0.0.9", "host-a"),
		QueueId:      pick(r, int32(-1), 0, 1, 3, 100),
	}
	if r.IntN(4) != 0 {
		sp.Tag = proto.String(choose(r, []string{"t", "tagA"}, "", "  ", "a|b", "a\nb"))
	}
	for range pick(r, 0, 0, 1, 2, 3) {
		sp.Keys = append(sp.Keys, choose(r, []string{"k1", "order-7"}, " ", "a\tb", ""))
	}
	if r.IntN(2) == 0 {
		sp.BornTimestamp = pick(r, timestamppb.New(genNow().Add(-time.Second)), &timestamppb.Timestamp{}, &timestamppb.Timestamp{Seconds: 5, Nanos: -1},
			&timestamppb.Timestamp{Seconds: 1 << 40})
	}
	if r.IntN(5) == 0 {
		sp.DeliveryTimestamp = choose(r, []*timestamppb.Timestamp{timestamppb.New(genNow().Add(time.Minute)), {}},
			timestamppb.New(genNow().Add(25*time.Hour)), &timestamppb.Timestamp{Nanos: 2e9})
	}
	if r.IntN(4) == 0 {
		sp.MessageGroup = proto.String(choose(r, []string{"g1", ""}, strings.Repeat("g", 64), "g\x7f"))
	}
	if r.IntN(4) == 0 {
		sp.TraceContext = proto.String(pick(r, "00-abc-01", ""))
	}
	if r.IntN(4) == 0 {
		sp.DeliveryAttempt = proto.Int32(pick(r, int32(0), 1, 3))
	}
	if r.IntN(4) == 0 {
		sp.OrphanedTransactionRecoveryDuration = choose(r, []*durationpb.Duration{durationpb.New(10 * time.Second), {}},
			durationpb.New(2*time.Hour), durationpb.New(-time.Second), &durationpb.Duration{Nanos: 2e9})
	}
	if r.IntN(6) == 0 {
		// Fields the broker ignores, which must still decode.
		sp.BodyDigest = &rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: "abc"}
		sp.StoreTimestamp = timestamppb.New(genNow())
		sp.StoreHost = "store"
		sp.ReceiptHandle = proto.String("handle")
		sp.QueueOffset = proto.Int64(42)
		sp.InvisibleDuration = durationpb.New(time.Second)
		sp.DeadLetterQueue = &rmqpb.DeadLetterQueue{Topic: "t", MessageId: "m"}
	}
	m.SystemProperties = sp
	return m
}

// wireKind says how the rewriter treats a field: a nested message of some
// schema, or a leaf.
type wireKind int

const (
	leaf wireKind = iota
	kRequest
	kMessage
	kResource
	kMapEntry
	kSystem
	kTime
	kDigest
	kDeadLetter
)

// nested says which length-delimited fields of each message kind are
// nested messages, of what kind, and whether they are singular (split into
// several occurrences, they merge).
func nested(k wireKind, num protowire.Number) (kind wireKind, singular, ok bool) {
	switch k {
	case kRequest:
		if num == 1 {
			return kMessage, false, true
		}
	case kMessage:
		switch num {
		case 1:
			return kResource, true, true
		case 2:
			return kMapEntry, false, true
		case 3:
			return kSystem, true, true
		}
	case kSystem:
		switch num {
		case 4:
			return kDigest, true, true
		case 7, 9, 11, 15, 19:
			return kTime, true, true
		case 20:
			return kDeadLetter, true, true
		}
	}
	return leaf, false, false
}

// wireField is one field of an encoding: its tag's number and type and the
// bytes of its value (for a length-delimited field, the content).
type wireField struct {
	num protowire.Number
	typ protowire.Type
	val []byte
}

// splitFields parses a well-formed encoding (what proto.Marshal produced).
func splitFields(b []byte) []wireField {
	var out []wireField
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
			v = b[:n]
		}
		b = b[n:]
		out = append(out, wireField{num, typ, v})
	}
	return out
}

func appendField(b []byte, f wireField) []byte {
	b = protowire.AppendTag(b, f.num, f.typ)
	if f.typ == protowire.BytesType {
		return protowire.AppendBytes(b, f.val)
	}
	return append(b, f.val...)
}

// rewrite re-encodes an encoding of kind k with random changes that keep
// it decodable (both decoders must still agree on what it means).
func rewrite(r *rand.Rand, b []byte, k wireKind) []byte {
	fs := splitFields(b)
	var out []wireField
	for _, f := range fs {
		sub, singular, isMsg := nested(k, f.num)
		isMsg = isMsg && f.typ == protowire.BytesType
		if isMsg {
			f.val = rewrite(r, f.val, sub)
			if singular && r.IntN(3) == 0 {
				// Split the message's fields into two occurrences, which
				// merge into the same message.
				inner := splitFields(f.val)
				cut := r.IntN(len(inner) + 1)
				var first, second []byte
				for i, g := range inner {
					if i < cut {
						first = appendField(first, g)
					} else {
						second = appendField(second, g)
					}
				}
				out = append(out, wireField{f.num, f.typ, first})
				f.val = second
			}
		}
		if r.IntN(20) == 0 {
			out = append(out, earlierValue(r, f, isMsg))
		}
		out = append(out, f)
	}
	for range pick(r, 0, 0, 0, 1, 2) {
		out = append(out, unknownField(r))
	}
	if r.IntN(3) == 0 {
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	var enc []byte
	for _, f := range out {
		enc = appendField(enc, f)
	}
	return enc
}

// earlierValue is another occurrence of f's field, sent before it: for a
// scalar or string the later value wins, a repeated field gets one more
// element, a message merges (an empty one still makes it present). Now and
// then a string is not UTF-8, which both decoders must refuse.
func earlierValue(r *rand.Rand, f wireField, isMsg bool) wireField {
	switch {
	case isMsg:
		return wireField{f.num, f.typ, nil}
	case f.typ == protowire.VarintType:
		return wireField{f.num, f.typ, protowire.AppendVarint(nil, pick(r, uint64(0), 1, 7, 1<<33, ^uint64(0)))}
	case f.typ == protowire.BytesType:
		return wireField{f.num, f.typ, []byte(choose(r, []string{"", "x", "other"}, "\xff"))}
	}
	return f
}

// unknownField is a field no schema here knows, or a known number under
// the wrong wire type; or, under a varint, a known varint field. Unknown
// fields are skipped whatever they hold, invalid UTF-8 included.
func unknownField(r *rand.Rand) wireField {
	num := pick(r, protowire.Number(99), 1000, 1<<29-1, 1, 2, 3, 4, 13)
	switch r.IntN(5) {
	case 0:
		return wireField{num, protowire.VarintType, protowire.AppendVarint(nil, r.Uint64())}
	case 1:
		return wireField{num, protowire.Fixed32Type, protowire.AppendFixed32(nil, r.Uint32())}
	case 2:
		return wireField{num, protowire.Fixed64Type, protowire.AppendFixed64(nil, r.Uint64())}
	case 3:
		// A group with a varint inside and its end tag.
		g := protowire.AppendTag(nil, 1, protowire.VarintType)
		g = protowire.AppendVarint(g, 5)
		g = protowire.AppendTag(g, num, protowire.EndGroupType)
		return wireField{num, protowire.StartGroupType, g}
	}
	return wireField{pick(r, protowire.Number(99), 1000, 1<<29-1), protowire.BytesType, []byte("\xff\xfe not UTF-8, not looked at")}
}

// genEncoding is a random request, encoded and rewritten.
func genEncoding(r *rand.Rand, maxMsgs int) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(genRequest(r, maxMsgs))
	if err != nil {
		panic(err)
	}
	if r.IntN(4) != 0 {
		b = rewrite(r, b, kRequest)
	}
	if len(b) > 0 && r.IntN(25) == 0 {
		// Damage: cut it short, or change a byte.
		if r.IntN(2) == 0 {
			return b[:r.IntN(len(b))]
		}
		b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
	}
	return b
}
