package wire

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// The vector is derived by hand from the algorithm: the keys sorted
// (AccessKey < b < topic; Signature left out) give the content
// "ak" + "2" + "T" + body "hello" = "ak2Thello", whose HMAC-SHA1 with the
// secret "sk", in Base64, was computed apart from this code (openssl dgst
// -sha1 -hmac sk).
func TestSignatureVector(t *testing.T) {
	ext := map[string]string{"topic": "T", ExtAccessKey: "ak", "b": "2", ExtSignature: "stale"}
	require.Equal(t, "4ukMQ+8O0GAm8vMbbS0VIq0KbAs=", Signature(ext, []byte("hello"), "sk"))
	// RocketMQ's own AclSignerTest vector: the content "RocketMQ" signed
	// with "12345678".
	require.Equal(t, "IUc8rrO/0gDch8CjObLQsW2rsiA=", Signature(map[string]string{"x": "RocketMQ"}, nil, "12345678"))
	// The security token is signed like any field: sorted by key
	// (AccessKey, SecurityToken, z) the content is
	// "rocketmq2" + "SecurityToken1" + "tok" (openssl again).
	ext = map[string]string{ExtAccessKey: "rocketmq2", ExtSecurityToken: "SecurityToken1", "z": "tok"}
	require.Equal(t, "FsOlKR+HDQiNTePvLePcEjDiBkY=", Signature(ext, nil, "12345678"))
}

// Keys sort as Java's String.compareTo: by UTF-16 code units.
func TestCompareJava(t *testing.T) {
	require.Negative(t, compareJava("AccessKey", "a"))
	require.Negative(t, compareJava("ab", "abc"))
	require.Zero(t, compareJava("é", "é"))
	// A supplementary character (a surrogate pair, 0xD83D...) sorts before
	// U+FFFF in Java, after it in UTF-8 byte order.
	require.Negative(t, compareJava("\U0001F600", "\uFFFF"))
	require.Positive(t, compareJava("\uFFFF", "\U0001F600"))
	require.Negative(t, compareJava("\U0001F600", "\U0001F601"))
}

// The hand-written JSON header reads back, through encoding/json, as the
// same values: odd characters included.
func TestJSONHeaderEncoding(t *testing.T) {
	odd := "q\"b\\s\n\r\t\x01\x1f é \u2028\u2029 \xff\xfe end"
	h := &Header{Code: 310, Language: LangGo, Version: 475, Opaque: -3, Flag: FlagOneway, Remark: odd,
		Ext: map[string]string{"a": odd, odd: "v", "": ""}}
	b := appendJSONHeader(nil, h)
	require.True(t, json.Valid(b), "%s", b)
	var got struct {
		Code      int32             `json:"code"`
		Language  string            `json:"language"`
		Version   int32             `json:"version"`
		Opaque    int32             `json:"opaque"`
		Flag      int32             `json:"flag"`
		Remark    string            `json:"remark"`
		ExtFields map[string]string `json:"extFields"`
		Serialize string            `json:"serializeTypeCurrentRPC"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	ref, err := json.Marshal(odd) // encoding/json's reading of the odd bytes
	require.NoError(t, err)
	var want string
	require.NoError(t, json.Unmarshal(ref, &want))
	require.Equal(t, want, got.Remark)
	require.Equal(t, map[string]string{"a": want, want: "v", "": ""}, got.ExtFields)
	require.Equal(t, "GO", got.Language)
	require.Equal(t, "JSON", got.Serialize)
	require.Equal(t, int32(310), got.Code)
	require.Equal(t, int32(-3), got.Opaque)
	require.Equal(t, int32(475), got.Version)

	// The signature covers what the server reads: invalid UTF-8 as U+FFFD.
	require.Equal(t, Signature(map[string]string{"a": want}, nil, "k"), Signature(map[string]string{"a": odd}, nil, "k"))
}

func BenchmarkAppendFrameHead(b *testing.B) {
	h := &Header{Code: CodeSendMessageV2, Language: LangGo, Version: 475, Opaque: 1, Ext: map[string]string{
		"a": "bench_group", "b": "remoting_bench", "c": "TBW102", "d": "4", "e": "3",
		"f": "0", "g": "1764115200000", "h": "0", "i": "UNIQ_KEY\x01C0A80001000000000000000000000001\x02", "j": "0", "k": "false", "m": "false", "n": "broker-0",
	}}
	for _, st := range []SerializeType{JSON, RocketMQ} {
		b.Run(map[SerializeType]string{JSON: "json", RocketMQ: "rocketmq"}[st], func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for range b.N {
				buf, _ = AppendFrameHead(buf[:0], h, 1024, st)
			}
		})
	}
}

// The hand-written JSON header reader agrees with encoding/json wherever
// it reads an input itself.
func FuzzJSONHeaderFastPath(f *testing.F) {
	f.Add(appendJSONHeader(nil, sampleHeader()))
	f.Add([]byte(`{"code":0,"extFields":{"queueId":"3","queueOffset":"12","x":null,"t":true},"flag":1,"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":475}`))
	f.Add([]byte(`{"code":1,"language":9,"opaque":1,"remark":"x"}`))
	f.Add([]byte(` { "Code" : 1 , "extFields" : { "k" : "v" , "k" : null } } `))
	f.Add([]byte(`{"extFields":{"a":null},"remark":null,"language":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Whatever encoding/json reads, the encoder writes back to the
		// same header (a language outside the enum reads back as OTHER).
		if slow, err := decodeJSONHeaderSlow(b); err == nil {
			if langName(slow.Language) == "OTHER" {
				slow.Language = langNames["OTHER"]
			}
			again, err := decodeJSONHeaderSlow(appendJSONHeader(nil, slow))
			require.NoError(t, err)
			if len(slow.Ext) == 0 {
				slow.Ext = nil // an empty map is not written
			}
			require.Equal(t, slow, again, "%q", b)
			fastAgain, ok := decodeJSONHeaderFast(appendJSONHeader(nil, slow))
			require.True(t, ok, "the fast path reads what the encoder writes")
			require.Equal(t, slow, fastAgain)
		}
		fast, ok := decodeJSONHeaderFast(b)
		if !ok {
			return
		}
		slow, err := decodeJSONHeaderSlow(b)
		if err != nil {
			t.Fatalf("fast path read %q, encoding/json refuses it: %v", b, err)
		}
		require.Equal(t, slow, fast, "%q", b)
	})
}

func TestJSONHeaderFastPathShapes(t *testing.T) {
	for _, in := range []string{
		string(appendJSONHeader(nil, sampleHeader())),
		`{"code":0,"extFields":{"queueId":"3","queueOffset":"12","x":null,"t":true},"flag":1,"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":475}`,
		`{"extFields":{"a":null},"remark":null,"language":null}`,
		`{}`,
		`{"remark":"a\nb\u00e9\ud83d\ude00\ud83d!\/"}`,
	} {
		fast, ok := decodeJSONHeaderFast([]byte(in))
		require.True(t, ok, in)
		slow, err := decodeJSONHeaderSlow([]byte(in))
		require.NoError(t, err)
		require.Equal(t, slow, fast, in)
	}
	for _, in := range []string{`{"Code":1}`, `{"code":1.0}`, "{\"remark\":\"a\x01b\"}", "{\"remark\":\"a\xffb\"}", `{"extFields":{"n":1}}`, `{"code":1,"code":2}`, `null`, `{"code":1} x`} {
		_, ok := decodeJSONHeaderFast([]byte(in))
		require.False(t, ok, in)
	}
}
