package remoting

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/remoting/wire"
)

// mapProperties is the encoder the driver had before it wrote properties
// straight into the body: a map per message, system properties over the
// user's, encoded by wire.EncodeProperties. The tests below hold the
// driver's encoding byte for byte to it.
func mapProperties(m *Message, group string) (map[string]string, error) {
	p := make(map[string]string, len(m.Properties)+6)
	for k, v := range m.Properties {
		p[k] = v
	}
	if m.Tag != "" {
		if strings.Contains(m.Tag, "|") {
			return nil, fmt.Errorf("%w: tag %q holds '|' (the separator of tag expressions)", ErrInvalidMessage, m.Tag)
		}
		p[wire.PropTags] = m.Tag
	}
	if len(m.Keys) > 0 {
		for _, k := range m.Keys {
			if strings.Contains(k, " ") {
				return nil, fmt.Errorf("%w: key %q holds a space (RocketMQ joins keys with spaces)", ErrInvalidMessage, k)
			}
		}
		p[wire.PropKeys] = strings.Join(m.Keys, " ")
	}
	if m.Group != "" {
		p[wire.PropShardingKey] = m.Group
	}
	if m.TraceContext != "" {
		p[wire.PropTraceContext] = m.TraceContext
	}
	p[wire.PropUniqKey] = m.ID
	p[wire.PropWait] = "true"
	if m.Transaction {
		p[wire.PropTranMsg] = "true"
		p[wire.PropProducerGroup] = group
	}
	return p, nil
}

// mapBatchBody is the batch body the map encoder built.
func mapBatchBody(group string, msgs []*Message) ([]byte, error) {
	bm := make([]wire.BatchMessage, len(msgs))
	for i, m := range msgs {
		if m.Transaction {
			return nil, fmt.Errorf("%w: message %d: a transactional message cannot be sent in a batch", ErrInvalidMessage, i)
		}
		p, err := mapProperties(m, group)
		if err != nil {
			return nil, err
		}
		delete(p, wire.PropWait)
		ps, err := wire.EncodeProperties(p)
		if err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrInvalidMessage, i, err)
		}
		bm[i] = wire.BatchMessage{Body: m.Body, Properties: ps}
	}
	b, err := wire.AppendBatch(nil, bm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	return b, nil
}

// encodeCases are messages of every property the driver writes: keys
// (one, several, empty), tags, groups, lanes, trace contexts, transaction
// pairs, user properties with odd characters (unicode, spaces, '=', ';',
// quotes, control characters other than the separators, empty values)
// and user properties named like system ones (the system value wins; a
// user's WAIT is dropped from a batch's message).
func encodeCases() []*Message {
	body := []byte("body")
	return []*Message{
		{Topic: "t", ID: "ID0", Body: body},
		{Topic: "t", ID: "ID1", Tag: "TagA", Body: body},
		{Topic: "t", ID: "ID2", Keys: []string{"k1"}, Body: body},
		{Topic: "t", ID: "ID3", Keys: []string{"k1", "k2", "日本"}, Tag: "t", Body: body},
		{Topic: "t", ID: "ID4", Keys: []string{""}, Body: body},
		{Topic: "t", ID: "ID5", Group: "order-42", Body: body},
		{Topic: "t", ID: "ID6", TraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Body: body},
		{Topic: "t", ID: "ID7", Properties: map[string]string{"__lane": "canary", "x-env": "gray"}, Body: body},
		{Topic: "t", ID: "ID8", Properties: map[string]string{
			"a b": "c d", "k=v": "x;y", "quote\"": "'\"\\", "ünï": "çødé ✓", "empty": "", "": "no name",
			"tab\t": "line\nbreak\r", "ctl\x03": "\x00\x7f", "Upper": "1", "lower": "2", "_": "3", "~": "4",
		}, Body: body},
		{Topic: "t", ID: "ID9", Tag: "sys", Keys: []string{"sk"}, Group: "g", TraceContext: "tc", Properties: map[string]string{
			wire.PropTags: "user-tag", wire.PropKeys: "user keys", wire.PropShardingKey: "ug", wire.PropTraceContext: "utc",
			wire.PropUniqKey: "user-id", wire.PropWait: "false", "OTHER": "o",
		}, Body: body},
		{Topic: "t", ID: "ID10", Properties: map[string]string{wire.PropTags: "only-user-tag", wire.PropKeys: "uk", wire.PropWait: "false"}, Body: body},
		{Topic: "t", ID: "ID11", Transaction: true, Tag: "tx", Properties: map[string]string{wire.PropTranMsg: "false", wire.PropProducerGroup: "other"}, Body: body},
		{Topic: "t", ID: "ID12", Properties: manyProperties(40), Body: []byte{}},
		{Topic: "t", ID: "", Tag: "noid", Body: body},
	}
}

func manyProperties(n int) map[string]string {
	p := make(map[string]string, n)
	for i := range n {
		p[fmt.Sprintf("p%03d", n-i)] = strings.Repeat("v", i)
	}
	return p
}

// Each message's properties are the bytes the map encoder wrote, single
// (with WAIT) and in a batch (without), whatever the map's order.
func TestPropertiesEncodeAsTheMapEncoder(t *testing.T) {
	for i, m := range encodeCases() {
		for range 5 { // the map encoder's result does not depend on map order; neither may ours
			want, err := mapProperties(m, "pg")
			require.NoError(t, err)
			ws, err := wire.EncodeProperties(want)
			require.NoError(t, err)
			got, err := m.appendProperties([]byte("prefix"), "pg", true)
			require.NoError(t, err)
			require.Equal(t, "prefix"+ws, string(got), "message %d", i)
		}
	}
}

// A batch body is byte for byte the map encoder's, for single messages,
// the varied set and many copies of it, and an empty-body message.
func TestBatchBodyEncodesAsTheMapEncoder(t *testing.T) {
	var all []*Message
	for _, m := range encodeCases() {
		if m.Transaction || m.ID == "" {
			continue
		}
		all = append(all, m)
	}
	batches := [][]*Message{all[:1], all}
	var big []*Message
	for range 10 {
		big = append(big, all...)
	}
	batches = append(batches, big)
	for _, msgs := range batches {
		want, err := mapBatchBody("pg", msgs)
		require.NoError(t, err)
		uniq := make([]string, len(msgs))
		got, err := appendBatchBody([]byte("pre"), NewIDGenerator(), "pg", msgs, uniq)
		require.NoError(t, err)
		require.Equal(t, append([]byte("pre"), want...), got)
		for i, m := range msgs {
			require.Equal(t, m.ID, uniq[i])
		}
	}
}

// Refusals are the map encoder's, message and all: a separator in a name
// or value (the first in key order is named), a '|' in a tag, a space in a
// key, a transactional message in a batch, properties too long for a
// short (after every other check).
func TestEncodeRefusesAsTheMapEncoder(t *testing.T) {
	long := map[string]string{"big": strings.Repeat("x", 0x8000)}
	bad := []*Message{
		{Topic: "t", ID: "1", Properties: map[string]string{"b": "x\x01y", "a": "ok", "c\x02": "z"}, Body: []byte("x")},
		{Topic: "t", ID: "2", Properties: map[string]string{"z\x01": "v", "y": "w\x02"}, Body: []byte("x")},
		{Topic: "t", ID: "3", Keys: []string{"a", "b\x01"}, Body: []byte("x")},
		{Topic: "t", ID: "4", Tag: "a\x02", Body: []byte("x")},
		{Topic: "t", ID: "5", Tag: "a|b", Keys: []string{"a b"}, Body: []byte("x")},
		{Topic: "t", ID: "6", Keys: []string{"ok", "a b"}, Body: []byte("x")},
		{Topic: "t", ID: "7", Group: "g\x01", Body: []byte("x")},
		{Topic: "t", ID: "8", TraceContext: "\x02", Body: []byte("x")},
	}
	for i, m := range bad {
		_, werr := mapProperties(m, "pg")
		if werr == nil {
			p, _ := mapProperties(m, "pg")
			_, werr = wire.EncodeProperties(p)
		}
		require.Error(t, werr, "case %d", i)
		_, gerr := m.appendProperties(nil, "pg", true)
		require.Error(t, gerr, "case %d", i)
		require.Equal(t, werr.Error(), gerr.Error(), "case %d", i)

		msgs := []*Message{{Topic: "t", ID: "ok", Body: []byte("x")}, m}
		_, werr = mapBatchBody("pg", msgs)
		_, gerr = appendBatchBody(nil, NewIDGenerator(), "pg", msgs, make([]string, 2))
		require.Equal(t, werr.Error(), gerr.Error(), "batch case %d", i)
		require.ErrorIs(t, gerr, ErrInvalidMessage)
	}
	for _, msgs := range [][]*Message{
		{{Topic: "t", ID: "a", Properties: long, Body: []byte("x")}},
		{{Topic: "t", ID: "a", Properties: long, Body: []byte("x")}, {Topic: "t", ID: "b", Transaction: true, Body: []byte("x")}},
		{{Topic: "t", ID: "a", Body: []byte("x")}, {Topic: "t", ID: "b", Properties: long, Body: []byte("x")}, {Topic: "t", ID: "c", Properties: long, Body: []byte("x")}},
	} {
		_, werr := mapBatchBody("pg", msgs)
		_, gerr := appendBatchBody(nil, NewIDGenerator(), "pg", msgs, make([]string, len(msgs)))
		require.Error(t, werr)
		require.Error(t, gerr)
		require.Equal(t, werr.Error(), gerr.Error())
		require.ErrorIs(t, gerr, ErrInvalidMessage)
	}
}

// Ids are 32 upper-case hex digits, as strings.ToUpper(hex) made them.
func TestIDGeneratorForm(t *testing.T) {
	g := NewIDGenerator()
	a, b := g.Next(), g.Next()
	require.Regexp(t, "^[0-9A-F]{32}$", a)
	require.NotEqual(t, a, b)
	require.Equal(t, a[:20], b[:20])
}

// The offset of an offset message id is DecodeOffsetMessageID's, for the
// ids it accepts, and refused where it refuses.
func TestOffsetOfMessageID(t *testing.T) {
	for _, id := range []string{
		"7f00000100002ae3000000000000abcd", "7F00000100002AE3" + "0000000000ABCDEF",
		"00000000000000000000000000000001" + "00002AE3" + "0000000000000010",
		"7F00000100002AE3FFFFFFFFFFFFFFFF", "", "7F00000100002AE30000000000ABCDEG",
		"7F00000100002AE30000000000ABCDE", "C0A80001ABCDEF0123456789ABCDEF01,C0A80001ABCDEF0123456789ABCDEF02",
		"g000000100002ae3000000000000abcd",
	} {
		_, want, werr := wire.DecodeOffsetMessageID(id)
		got, ok := wire.OffsetOfMessageID(id)
		require.Equal(t, werr == nil, ok, id)
		if ok {
			require.Equal(t, want, got, id)
		}
	}
}

// benchBatch is a batch of 32 messages of 1 KiB, each with a tag, a key,
// a lane and its id.
func benchBatch() []*Message {
	body := make([]byte, 1024)
	msgs := make([]*Message, 32)
	for i := range msgs {
		msgs[i] = &Message{Topic: "t", ID: fmt.Sprintf("%032X", i), Tag: "TagA", Keys: []string{fmt.Sprintf("order-%d", i)},
			Properties: map[string]string{"__lane": "canary"}, Body: body}
	}
	return msgs
}

// BenchmarkBatchBody encodes a batch body of 32 messages: through a
// property map per message (the encoder before) and straight into the body.
func BenchmarkBatchBody(b *testing.B) {
	msgs := benchBatch()
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := mapBatchBody("pg", msgs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		ids := NewIDGenerator()
		uniq := make([]string, len(msgs))
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = appendBatchBody(buf[:0], ids, "pg", msgs, uniq); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Any message encodes as the map encoder encodes it, or is refused with
// its error.
func FuzzPropertiesEncode(f *testing.F) {
	f.Add("TagA", "k1 k2", "g", "tc", "__lane", "canary", "TAGS", "x", false)
	f.Add("a|b", "", "", "", "WAIT", "false", "a\x01", "\x02", true)
	f.Fuzz(func(t *testing.T, tag, keys, group, trace, k1, v1, k2, v2 string, tx bool) {
		m := &Message{Topic: "t", ID: "ID", Tag: tag, Group: group, TraceContext: trace, Transaction: tx,
			Properties: map[string]string{k1: v1, k2: v2}}
		if keys != "" {
			m.Keys = strings.Split(keys, ",")
		}
		want, werr := mapProperties(m, "pg")
		var ws string
		if werr == nil {
			ws, werr = wire.EncodeProperties(want)
		}
		got, gerr := m.appendProperties(nil, "pg", true)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Fatalf("errors: map %v, direct %v", werr, gerr)
		}
		if werr == nil && ws != string(got) {
			t.Fatalf("map %q, direct %q", ws, got)
		}
	})
}
