package driver

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/md5"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// cannedStream replays frames, then ends with err (io.EOF if nil).
type cannedStream struct {
	frames []*rmqpb.ReceiveMessageResponse
	err    error
}

func (s *cannedStream) Recv() (*rmqpb.ReceiveMessageResponse, error) {
	if len(s.frames) == 0 {
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
	f := s.frames[0]
	s.frames = s.frames[1:]
	return f, nil
}

func statusFrame(c rmqpb.Code) *rmqpb.ReceiveMessageResponse {
	return &rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: &rmqpb.Status{Code: c, Message: c.String()}}}
}

func msgFrame(m *rmqpb.Message) *rmqpb.ReceiveMessageResponse {
	return &rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Message{Message: m}}
}

func tsFrame() *rmqpb.ReceiveMessageResponse {
	return &rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.Now()}}
}

func md5Upper(b []byte) string {
	s := md5.Sum(b)
	return strings.ToUpper(hex.EncodeToString(s[:]))
}

func wireMessage(id string, body []byte) *rmqpb.Message {
	born := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return &rmqpb.Message{
		Topic:          &rmqpb.Resource{Name: "orders"},
		UserProperties: map[string]string{"lane": "a.x"},
		Body:           body,
		SystemProperties: &rmqpb.SystemProperties{
			Tag: proto.String("paid"), Keys: []string{"k1", "k2"}, MessageId: id,
			BodyDigest:    &rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: md5Upper(body)},
			BodyEncoding:  rmqpb.Encoding_IDENTITY,
			MessageType:   rmqpb.MessageType_FIFO,
			BornTimestamp: timestamppb.New(born), BornHost: "h1",
			StoreTimestamp: timestamppb.New(born.Add(time.Second)), StoreHost: "10.0.0.1:10911",
			ReceiptHandle: proto.String("rh-" + id), QueueId: 3, QueueOffset: proto.Int64(42),
			DeliveryAttempt: proto.Int32(2), MessageGroup: proto.String("g1"),
			DeadLetterQueue: &rmqpb.DeadLetterQueue{Topic: "orders", MessageId: "orig"},
		},
	}
}

func TestReadReceiveMessages(t *testing.T) {
	s := &cannedStream{frames: []*rmqpb.ReceiveMessageResponse{
		statusFrame(rmqpb.Code_OK), msgFrame(wireMessage("m1", []byte("one"))), msgFrame(wireMessage("m2", []byte("two"))), tsFrame(),
	}}
	msgs, err := readReceive(s, "10.0.0.1:8081")
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	m := msgs[0]
	assert.Equal(t, "orders", m.Topic)
	assert.Equal(t, "m1", m.ID)
	assert.Equal(t, "paid", m.Tag)
	assert.Equal(t, []string{"k1", "k2"}, m.Keys)
	assert.Equal(t, "g1", m.Group)
	assert.Equal(t, TypeFIFO, m.Type)
	assert.Equal(t, map[string]string{"lane": "a.x"}, m.Properties)
	assert.Equal(t, []byte("one"), m.Body)
	assert.Equal(t, "rh-m1", m.ReceiptHandle)
	assert.Equal(t, int32(2), m.DeliveryAttempt)
	assert.Equal(t, int32(3), m.QueueID)
	assert.Equal(t, int64(42), m.QueueOffset)
	assert.Equal(t, "10.0.0.1:8081", m.Endpoint)
	assert.Equal(t, "h1", m.BornHost)
	assert.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), m.BornTime)
	assert.Equal(t, &DeadLetterInfo{Topic: "orders", MessageID: "orig"}, m.DeadLetter)
	assert.NoError(t, m.Err)
}

func TestReadReceiveEmptyIsNotAnError(t *testing.T) {
	msgs, err := readReceive(&cannedStream{frames: []*rmqpb.ReceiveMessageResponse{statusFrame(rmqpb.Code_MESSAGE_NOT_FOUND), tsFrame()}}, "h:1")
	require.NoError(t, err)
	assert.Empty(t, msgs)
}

func TestReadReceiveFailures(t *testing.T) {
	_, err := readReceive(&cannedStream{frames: []*rmqpb.ReceiveMessageResponse{statusFrame(rmqpb.Code_TOO_MANY_REQUESTS)}}, "h:1")
	assert.ErrorIs(t, err, ErrTooManyRequests)
	_, err = readReceive(&cannedStream{frames: []*rmqpb.ReceiveMessageResponse{statusFrame(rmqpb.Code_ILLEGAL_INVISIBLE_TIME)}}, "h:1")
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = readReceive(&cannedStream{}, "h:1")
	assert.ErrorIs(t, err, ErrInternal, "a stream with no status at all is a server failure")
	broken := errors.New("broken pipe")
	_, err = readReceive(&cannedStream{frames: []*rmqpb.ReceiveMessageResponse{statusFrame(rmqpb.Code_OK)}, err: broken}, "h:1")
	assert.ErrorIs(t, err, broken)
}

func TestReceivedBodyDigestAndEncoding(t *testing.T) {
	bad := wireMessage("m1", []byte("body"))
	bad.Body = []byte("tampered")
	m := convertMessage(bad, "h:1")
	assert.ErrorIs(t, m.Err, ErrCorrupted)

	plain := []byte(strings.Repeat("compress me ", 100))
	var gz, zl bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(plain)
	require.NoError(t, w.Close())
	zw := zlib.NewWriter(&zl)
	_, _ = zw.Write(plain)
	require.NoError(t, zw.Close())
	for name, enc := range map[string][]byte{"gzip": gz.Bytes(), "zlib": zl.Bytes()} {
		wm := wireMessage("m", enc)
		wm.SystemProperties.BodyEncoding = rmqpb.Encoding_GZIP
		m := convertMessage(wm, "h:1")
		require.NoError(t, m.Err, name)
		assert.Equal(t, plain, m.Body, name)
	}

	unknown := wireMessage("m", []byte{0x28, 0xb5, 0x2f, 0xfd, 0}) // zstd magic
	unknown.SystemProperties.BodyEncoding = rmqpb.Encoding_GZIP
	assert.ErrorIs(t, convertMessage(unknown, "h:1").Err, ErrCorrupted)

	crc := wireMessage("m", []byte("abc"))
	crc.SystemProperties.BodyDigest = &rmqpb.Digest{Type: rmqpb.DigestType_CRC32, Checksum: "352441C2"}
	assert.NoError(t, convertMessage(crc, "h:1").Err)
	crc.SystemProperties.BodyDigest.Checksum = "00000000"
	assert.ErrorIs(t, convertMessage(crc, "h:1").Err, ErrCorrupted)
}

// TestVerifyDigestForms: a digest is accepted in either hex case and
// rejected when it differs in any way, including its length or a character
// that is not hex.
func TestVerifyDigestForms(t *testing.T) {
	body := []byte("digest me")
	m := md5.Sum(body)
	s := sha1.Sum(body)
	upper := strings.ToUpper(hex.EncodeToString(m[:]))
	lower := hex.EncodeToString(m[:])
	for name, c := range map[string]struct {
		d  *rmqpb.Digest
		ok bool
	}{
		"md5 upper":      {&rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: upper}, true},
		"md5 lower":      {&rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: lower}, true},
		"sha1":           {&rmqpb.Digest{Type: rmqpb.DigestType_SHA1, Checksum: hex.EncodeToString(s[:])}, true},
		"none":           {nil, true},
		"unknown type":   {&rmqpb.Digest{Type: rmqpb.DigestType(42), Checksum: "zz"}, true},
		"md5 other body": {&rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: md5Upper([]byte("other"))}, false},
		"md5 short":      {&rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: upper[:30]}, false},
		"md5 long":       {&rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: upper + "00"}, false},
		"md5 not hex":    {&rmqpb.Digest{Type: rmqpb.DigestType_MD5, Checksum: "G" + upper[1:]}, false},
		"sha1 as md5":    {&rmqpb.Digest{Type: rmqpb.DigestType_SHA1, Checksum: upper}, false},
	} {
		err := verifyDigest(c.d, body)
		if c.ok {
			assert.NoError(t, err, name)
		} else {
			assert.Error(t, err, name)
		}
	}
}

func FuzzConvertMessage(f *testing.F) {
	add := func(m *rmqpb.Message) { b, _ := proto.Marshal(m); f.Add(b) }
	add(wireMessage("m1", []byte("hello")))
	gz := wireMessage("m2", []byte{0x1f, 0x8b, 8, 0, 0, 0})
	gz.SystemProperties.BodyEncoding = rmqpb.Encoding_GZIP
	gz.SystemProperties.BodyDigest = nil
	add(gz)
	add(&rmqpb.Message{})
	f.Add([]byte{0x1a, 0x02, 0x22, 0x00})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var m rmqpb.Message
		if proto.Unmarshal(raw, &m) != nil {
			return
		}
		out := convertMessage(&m, "h:1")
		if out == nil {
			t.Fatal("nil message")
		}
		if out.Err != nil && !errors.Is(out.Err, ErrCorrupted) {
			t.Fatalf("untyped error %v", out.Err)
		}
	})
}

func FuzzReadReceive(f *testing.F) {
	enc := func(frames ...*rmqpb.ReceiveMessageResponse) []byte {
		// Frames are length-prefixed (one byte) for the fuzzer.
		var out []byte
		for _, fr := range frames {
			b, _ := proto.Marshal(fr)
			out = append(out, byte(len(b)))
			out = append(out, b...)
		}
		return out
	}
	f.Add(enc(statusFrame(rmqpb.Code_OK), msgFrame(&rmqpb.Message{Body: []byte("x")}), tsFrame()))
	f.Add(enc(statusFrame(rmqpb.Code_MESSAGE_NOT_FOUND), tsFrame()))
	f.Add(enc(statusFrame(rmqpb.Code_FORBIDDEN)))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var frames []*rmqpb.ReceiveMessageResponse
		for len(raw) > 0 {
			n := int(raw[0])
			raw = raw[1:]
			if n > len(raw) {
				return
			}
			var fr rmqpb.ReceiveMessageResponse
			if proto.Unmarshal(raw[:n], &fr) != nil {
				return
			}
			frames = append(frames, &fr)
			raw = raw[n:]
		}
		msgs, err := readReceive(&cannedStream{frames: frames}, "h:1")
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.class == nil {
				t.Fatalf("untyped error %v", err)
			}
			if msgs != nil {
				t.Fatal("messages returned with an error")
			}
		}
	})
}
