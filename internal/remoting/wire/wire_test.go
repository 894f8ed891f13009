package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func sampleHeader() *Header {
	return &Header{Code: CodeSendMessageV2, Language: LangGo, Version: 317, Opaque: 42, Flag: FlagOneway,
		Remark: "hello", Ext: map[string]string{"a": "group", "b": "topic", "i": "KEYS\x01k\x02"}}
}

func TestFrameRoundTripBothSerializations(t *testing.T) {
	for _, st := range []SerializeType{JSON, RocketMQ} {
		h := sampleHeader()
		f, err := AppendFrame(nil, h, []byte("body"), st)
		require.NoError(t, err)
		c, err := DecodeFrame(f, DefaultMaxFrame)
		require.NoError(t, err)
		require.Equal(t, st, c.Serialize)
		require.Equal(t, *h, c.Header)
		require.Equal(t, []byte("body"), c.Body)
		require.True(t, c.IsOneway())
		require.False(t, c.IsResponse())

		c2, err := ReadFrame(bytes.NewReader(f), 0)
		require.NoError(t, err)
		require.Equal(t, c.Header, c2.Header)
	}
}

// The binary layout is RocketMQSerializable's, byte for byte.
func TestBinaryHeaderLayout(t *testing.T) {
	h := &Header{Code: 105, Language: LangJava, Version: 1, Opaque: 7, Flag: FlagResponse, Remark: "r", Ext: map[string]string{"k": "vv"}}
	b, err := EncodeHeader(h, RocketMQ)
	require.NoError(t, err)
	want := []byte{0, 105, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 'r', 0, 0, 0, 9, 0, 1, 'k', 0, 0, 0, 2, 'v', 'v'}
	require.Equal(t, want, b)
}

// A Java server writes the language as its name; some write a number.
func TestJSONHeaderFromJava(t *testing.T) {
	h, err := DecodeHeader([]byte(`{"code":0,"extFields":{"queueId":"3","queueOffset":"12"},"flag":1,"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":475}`), JSON)
	require.NoError(t, err)
	require.Equal(t, int32(9), h.Opaque)
	require.True(t, h.IsResponse())
	require.Equal(t, "12", h.Ext["queueOffset"])
	h, err = DecodeHeader([]byte(`{"code":1,"language":9,"opaque":1,"remark":"x"}`), JSON)
	require.NoError(t, err)
	require.Equal(t, LangGo, h.Language)
	require.Equal(t, "x", h.Remark)
}

// A pop code does not fit the binary header's 16 bits: refused, not
// truncated into another request's code.
func TestBinaryHeaderRefusesWideCode(t *testing.T) {
	_, err := EncodeHeader(&Header{Code: 200050}, RocketMQ)
	require.Error(t, err)
	_, err = EncodeHeader(&Header{Code: 200050}, JSON)
	require.NoError(t, err)
}

func TestDecodeErrorsAreTyped(t *testing.T) {
	_, err := DecodeFrame([]byte{0, 0, 0, 9, 1}, 0)
	require.ErrorIs(t, err, ErrMalformed)
	_, err = DecodeFrame([]byte{0x7f, 0, 0, 0}, 1024)
	require.ErrorIs(t, err, ErrFrameTooLarge)
	_, err = ReadFrame(bytes.NewReader([]byte{0x7f, 0, 0, 0}), 1024)
	require.ErrorIs(t, err, ErrFrameTooLarge)
	_, err = DecodeHeader([]byte{1, 2}, RocketMQ)
	require.ErrorIs(t, err, ErrMalformed)
	_, err = DecodeHeader([]byte(`{"code":`), JSON)
	require.ErrorIs(t, err, ErrMalformed)
	_, err = DecodeHeader(nil, 7)
	require.ErrorIs(t, err, ErrMalformed)
}

func TestPropertiesRoundTrip(t *testing.T) {
	p := map[string]string{"TAGS": "a", "KEYS": "k1 k2", "x": ""}
	s, err := EncodeProperties(p)
	require.NoError(t, err)
	require.Equal(t, "KEYS\x01k1 k2\x02TAGS\x01a\x02x\x01\x02", s)
	require.Equal(t, p, DecodeProperties(s))
	_, err = EncodeProperties(map[string]string{"k": "a\x02b"})
	require.ErrorIs(t, err, ErrMalformed)
	require.Equal(t, map[string]string{"a": "1"}, DecodeProperties("junk\x02a\x011"))
}

func TestBatchRoundTrip(t *testing.T) {
	in := []BatchMessage{{Flag: 1, Body: []byte("one"), Properties: "a\x01b\x02"}, {Body: []byte("two")}}
	b, err := AppendBatch(nil, in)
	require.NoError(t, err)
	require.Equal(t, uint32(4+4+4+4+4+3+2+4), binary.BigEndian.Uint32(b))
	out, err := DecodeBatch(b)
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Equal(t, in[0], out[0])
	require.Equal(t, []byte("two"), out[1].Body)
	_, err = DecodeBatch(b[:len(b)-1])
	require.True(t, errors.Is(err, ErrMalformed))
}

func FuzzDecodeFrame(f *testing.F) {
	for _, st := range []SerializeType{JSON, RocketMQ} {
		fr, _ := AppendFrame(nil, sampleHeader(), []byte("x"), st)
		f.Add(fr)
	}
	f.Add([]byte{0, 0, 0, 4, 1, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeFrame(b, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// What decodes re-encodes and decodes to the same header.
		fr, err := AppendFrame(nil, &c.Header, c.Body, RocketMQ)
		if err != nil {
			return
		}
		c2, err := DecodeFrame(fr, 0)
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if c2.Code != int32(int16(c.Code)) || c2.Opaque != c.Opaque || c2.Remark != c.Remark || len(c2.Ext) != len(c.Ext) {
			t.Fatalf("round trip changed the header: %+v vs %+v", c.Header, c2.Header)
		}
		_, _ = DecodeBatch(c.Body)
	})
}

func FuzzDecodeHeader(f *testing.F) {
	for _, st := range []SerializeType{JSON, RocketMQ} {
		h, _ := EncodeHeader(sampleHeader(), st)
		f.Add(byte(st), h)
	}
	f.Add(byte(0), []byte(`{"language":{}}`))
	f.Add(byte(1), []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, st byte, b []byte) {
		_, err := DecodeHeader(b, SerializeType(st))
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("untyped error %v", err)
		}
		m := DecodeProperties(string(b))
		pairs := AppendPropertyPairs(nil, string(b))
		if len(pairs) != len(m) {
			t.Fatalf("%d pairs, %d properties", len(pairs), len(m))
		}
		for _, p := range pairs {
			if v, ok := m[p.Name]; !ok || v != p.Value {
				t.Fatalf("pair %q=%q, property %q", p.Name, p.Value, v)
			}
		}
		if _, err := DecodeBatch(b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("untyped batch error %v", err)
		}
	})
}

func TestMessageExtRoundTrip(t *testing.T) {
	m := MessageExt{Topic: "T", QueueID: 3, Flag: 1, QueueOffset: 9, CommitLogOff: 1234, SysFlag: SysTransactionPrepare,
		BornTimestamp: 1700000000000, BornHost: "10.1.2.3:5555", StoreTimestamp: 1700000000001, StoreHost: "127.0.0.1:10911",
		ReconsumeTimes: 2, PreparedTxOff: 77, Body: []byte("hello"), Properties: map[string]string{"UNIQ_KEY": "ABC"}}
	b, err := AppendMessageExt(nil, &m)
	require.NoError(t, err)
	b, err = AppendMessageExt(b, &m)
	require.NoError(t, err)
	out, err := DecodeMessageExts(b)
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Equal(t, m, out[1])
	_, err = DecodeMessageExts(b[:len(b)-1])
	require.ErrorIs(t, err, ErrMalformed)
}

func FuzzDecodeMessageExts(f *testing.F) {
	m := MessageExt{Topic: "T", Body: []byte("x"), BornHost: "1.2.3.4:5", StoreHost: "1.2.3.4:6"}
	b, _ := AppendMessageExt(nil, &m)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := DecodeMessageExts(b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

// The offset message id of a RocketMQ broker: store host and commit log
// offset, IPv4 (16 bytes) or IPv6 (28 bytes), either case.
func TestDecodeOffsetMessageID(t *testing.T) {
	h, off, err := DecodeOffsetMessageID("7f00000100002ae3000000000000abcd")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:10979", h)
	require.Equal(t, int64(0xABCD), off)
	h, off, err = DecodeOffsetMessageID("00000000000000000000000000000001" + "00002AE3" + "0000000000000010")
	require.NoError(t, err)
	require.Equal(t, "[::1]:10979", h)
	require.Equal(t, int64(16), off)
	for _, bad := range []string{"", "7F000001", "8332FA6816C52633B8F500000001000X", "ABCDEF"} {
		_, _, err := DecodeOffsetMessageID(bad)
		require.ErrorIs(t, err, ErrMalformed, bad)
	}
}

// AppendPropertyPairs yields DecodeProperties' map, duplicates (last value
// kept), pairs without a name separator, empty names and values, and past
// the count where it indexes names.
func TestAppendPropertyPairsAsDecodeProperties(t *testing.T) {
	many := ""
	for i := range 100 {
		many += fmt.Sprintf("k%d\x01v%d\x02", i%70, i)
	}
	for _, s := range []string{
		"", "a\x011\x02", "a\x011", "junk\x02a\x011\x02b\x01\x02\x01empty name\x02",
		"a\x011\x02b\x012\x02a\x013\x02", "x\x01y\x01z\x02\x02\x02", many, many + "k3\x01last\x02noSep",
	} {
		got := AppendPropertyPairs([]Property{{Name: "before", Value: "kept"}}, s)
		require.Equal(t, Property{Name: "before", Value: "kept"}, got[0])
		m := map[string]string{}
		for _, p := range got[1:] {
			_, dup := m[p.Name]
			require.False(t, dup, "%q: %q twice", s, p.Name)
			m[p.Name] = p.Value
		}
		require.Equal(t, DecodeProperties(s), m, "%q", s)
	}
}

// BenchmarkReadProperties reads a message's properties as the broker does:
// into a map (DecodeProperties) and into pairs (AppendPropertyPairs).
func BenchmarkReadProperties(b *testing.B) {
	s := "KEYS\x01order-1\x02TAGS\x01TagA\x02UNIQ_KEY\x010A0B0C0D0E0F00112233445566778899\x02__lane\x01canary\x02"
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(DecodeProperties(s)) != 4 {
				b.Fatal("pairs")
			}
		}
	})
	b.Run("pairs", func(b *testing.B) {
		b.ReportAllocs()
		var arr [24]Property
		for b.Loop() {
			if len(AppendPropertyPairs(arr[:0], s)) != 4 {
				b.Fatal("pairs")
			}
		}
	})
}
