package driver

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/md5"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"time"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// AnyQueue as Message.QueueID lets the server pick the queue.
const AnyQueue int32 = -1

// MessageType is the protocol's message type.
type MessageType int

// Message types.
const (
	TypeUnspecified MessageType = iota
	TypeNormal
	TypeFIFO
	TypeDelay
	TypeTransaction
)

func (t MessageType) String() string {
	switch t {
	case TypeNormal:
		return "NORMAL"
	case TypeFIFO:
		return "FIFO"
	case TypeDelay:
		return "DELAY"
	case TypeTransaction:
		return "TRANSACTION"
	default:
		return "UNSPECIFIED"
	}
}

func messageTypeFromPB(t rmqpb.MessageType) MessageType {
	switch t {
	case rmqpb.MessageType_NORMAL:
		return TypeNormal
	case rmqpb.MessageType_FIFO:
		return TypeFIFO
	case rmqpb.MessageType_DELAY:
		return TypeDelay
	case rmqpb.MessageType_TRANSACTION:
		return TypeTransaction
	default:
		return TypeUnspecified
	}
}

// Message is one message to send.
type Message struct {
	Topic string
	// Tag is the single tag consumers filter on ("" = none).
	Tag string
	// Keys index the message for look-ups.
	Keys []string
	// ID is the message id; empty means the driver generates one.
	ID string
	// Group is the FIFO message group ("" = not ordered).
	Group string
	// DeliveryTime, when set, delays delivery until then.
	DeliveryTime time.Time
	// Properties are user properties; reserved RocketMQ keys are rejected
	// by the server.
	Properties map[string]string
	Body       []byte
	// QueueID is the target queue id. The embedded broker honours ids >= 0
	// and picks one itself for AnyQueue; a real proxy always picks itself.
	QueueID int32
	// Transactional sends a half message that EndTransaction resolves.
	Transactional bool
	// OrphanRecovery is how long the server waits before asking about an
	// unresolved transactional message (0 = server default).
	OrphanRecovery time.Duration
	TraceContext   string
	// BornHost defaults to the local host name, BornTime to now.
	BornHost string
	BornTime time.Time
}

// Type returns the type the message is sent as, with the protocol's
// precedence: transaction, delay, FIFO, normal.
func (m *Message) Type() MessageType {
	switch {
	case m.Transactional:
		return TypeTransaction
	case !m.DeliveryTime.IsZero():
		return TypeDelay
	case m.Group != "":
		return TypeFIFO
	default:
		return TypeNormal
	}
}

// DeadLetterInfo tells where a dead-lettered message came from.
type DeadLetterInfo struct {
	Topic     string
	MessageID string
}

// ReceivedMessage is a message as delivered by a server.
type ReceivedMessage struct {
	Topic      string
	ID         string
	Tag        string
	Keys       []string
	Group      string
	Type       MessageType
	Properties map[string]string
	// Body is decoded (decompressed) when the server marked it encoded.
	Body []byte

	BornHost     string
	BornTime     time.Time
	StoreHost    string
	StoreTime    time.Time
	DeliveryTime time.Time
	TraceContext string

	// ReceiptHandle acknowledges or re-schedules this delivery.
	ReceiptHandle string
	// DeliveryAttempt is 1 on the first delivery.
	DeliveryAttempt int32
	QueueID         int32
	QueueOffset     int64
	// Endpoint is the server the message came from; ack it there.
	Endpoint string
	// DeadLetter is set for messages read from a dead-letter topic.
	DeadLetter *DeadLetterInfo
	// Err is set (class ErrCorrupted) when the body failed its digest or
	// could not be decoded; the consumer should not hand it to a handler.
	Err error
}

// convertMessage maps a protocol message to a ReceivedMessage, verifying
// the body digest and decoding the body. It never fails: problems with the
// body are reported in Err.
func convertMessage(m *rmqpb.Message, endpoint string) *ReceivedMessage {
	sp := m.GetSystemProperties()
	out := &ReceivedMessage{
		Topic:           m.GetTopic().GetName(),
		ID:              sp.GetMessageId(),
		Tag:             sp.GetTag(),
		Keys:            sp.GetKeys(),
		Group:           sp.GetMessageGroup(),
		Type:            messageTypeFromPB(sp.GetMessageType()),
		Properties:      m.GetUserProperties(),
		Body:            m.GetBody(),
		BornHost:        sp.GetBornHost(),
		StoreHost:       sp.GetStoreHost(),
		TraceContext:    sp.GetTraceContext(),
		ReceiptHandle:   sp.GetReceiptHandle(),
		DeliveryAttempt: sp.GetDeliveryAttempt(),
		QueueID:         sp.GetQueueId(),
		QueueOffset:     sp.GetQueueOffset(),
		Endpoint:        endpoint,
	}
	if ts := sp.GetBornTimestamp(); ts != nil {
		out.BornTime = ts.AsTime()
	}
	if ts := sp.GetStoreTimestamp(); ts != nil {
		out.StoreTime = ts.AsTime()
	}
	if ts := sp.GetDeliveryTimestamp(); ts != nil {
		out.DeliveryTime = ts.AsTime()
	}
	if d := sp.GetDeadLetterQueue(); d != nil {
		out.DeadLetter = &DeadLetterInfo{Topic: d.GetTopic(), MessageID: d.GetMessageId()}
	}
	if err := verifyDigest(sp.GetBodyDigest(), out.Body); err != nil {
		out.Err = fmt.Errorf("message %s: %w: %w", out.ID, ErrCorrupted, err)
		return out
	}
	if sp.GetBodyEncoding() == rmqpb.Encoding_GZIP {
		body, err := decodeBody(out.Body)
		if err != nil {
			out.Err = fmt.Errorf("message %s: %w: %w", out.ID, ErrCorrupted, err)
			return out
		}
		out.Body = body
	}
	return out
}

// verifyDigest checks the body against the digest the server computed over
// the stored bytes. No digest, or an unknown digest type, passes. It runs
// for every message received, so the expected sum is decoded from hex and
// compared as bytes: nothing is allocated unless the check fails.
func verifyDigest(d *rmqpb.Digest, body []byte) error {
	want := d.GetChecksum()
	if want == "" {
		return nil
	}
	switch d.GetType() {
	case rmqpb.DigestType_MD5:
		s := md5.Sum(body)
		if !hexEqual(want, s[:]) {
			return digestMismatch(d, s[:])
		}
	case rmqpb.DigestType_SHA1:
		s := sha1.Sum(body)
		if !hexEqual(want, s[:]) {
			return digestMismatch(d, s[:])
		}
	case rmqpb.DigestType_CRC32:
		sum := crc32.ChecksumIEEE(body)
		w, err := strconv.ParseUint(want, 16, 32)
		if err != nil || uint32(w) != sum {
			return fmt.Errorf("CRC32 digest %s does not match body (%X)", truncate(want, 64), sum)
		}
	}
	return nil
}

// hexEqual reports whether s is the hex encoding of sum, in either case.
func hexEqual(s string, sum []byte) bool {
	if len(s) != 2*len(sum) {
		return false
	}
	for i, c := range sum {
		hi, ok1 := fromHex(s[2*i])
		lo, ok2 := fromHex(s[2*i+1])
		if !ok1 || !ok2 || hi<<4|lo != c {
			return false
		}
	}
	return true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func digestMismatch(d *rmqpb.Digest, got []byte) error {
	return fmt.Errorf("%s digest %s does not match body (%s)", d.GetType(), truncate(d.GetChecksum(), 64), hex.EncodeToString(got))
}

// MaxDecodedBody bounds decompression so a hostile body cannot exhaust
// memory (the protocol's maximum body is 4 MiB before compression).
const MaxDecodedBody = 64 << 20

// decodeBody decompresses a body the server marked GZIP. Older producers
// wrote zlib under the same flag, so both are recognised by their magic
// bytes; other compressions are reported as errors.
func decodeBody(b []byte) ([]byte, error) {
	var r io.ReadCloser
	var err error
	switch {
	case len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b:
		r, err = gzip.NewReader(bytes.NewReader(b))
	case len(b) >= 2 && b[0]&0x0f == 8 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0:
		r, err = zlib.NewReader(bytes.NewReader(b))
	default:
		return nil, fmt.Errorf("unsupported body compression (first bytes % x)", b[:min(len(b), 4)])
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, MaxDecodedBody+1))
	if err != nil {
		return nil, err
	}
	if len(out) > MaxDecodedBody {
		return nil, fmt.Errorf("decoded body exceeds %d bytes", MaxDecodedBody)
	}
	return out, nil
}
