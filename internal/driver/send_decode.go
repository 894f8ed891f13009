package driver

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/twinmq/twinmq/internal/pb/pbcodec"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Field numbers of SendMessageResponse, SendResultEntry and Status.
const (
	fieldRespStatus  = 1 // SendMessageResponse.status
	fieldRespEntries = 2 // SendMessageResponse.entries

	fieldEntryStatus        = 1 // SendResultEntry.status
	fieldEntryMessageID     = 2 // SendResultEntry.message_id
	fieldEntryTransactionID = 3 // SendResultEntry.transaction_id
	fieldEntryOffset        = 4 // SendResultEntry.offset
	fieldEntryRecallHandle  = 5 // SendResultEntry.recall_handle

	fieldStatusCode    = 1 // Status.code
	fieldStatusMessage = 2 // Status.message
)

// errMalformed is the class of every decoding failure of a response. gRPC
// turns an unmarshal error into an Internal status, which the driver
// classifies as ErrInternal, the same as for the generated decoder.
var errMalformed = errors.New("malformed protobuf")

// sendResponse decodes a SendMessageResponse straight into the sendAnswer
// normalizeSend reads (pbcodec.BufferUnmarshaler), instead of a generated
// response with a struct, a Status and strings per entry. It follows
// proto.Unmarshal: fields in any order, unknown fields (and known fields
// of an unexpected wire type) skipped, repeated occurrences of a singular
// message field merged, the last scalar wins, invalid UTF-8 in a string
// field and truncated input are errors.
type sendResponse struct {
	sendAnswer
}

var _ pbcodec.BufferUnmarshaler = (*sendResponse)(nil)

// UnmarshalBuffer decodes buf and frees it; the strings kept are copies.
func (r *sendResponse) UnmarshalBuffer(buf mem.Buffer) error {
	err := r.decode(buf.ReadOnlyData())
	buf.Free()
	return err
}

// decode replaces r's content with the response encoded in b.
func (r *sendResponse) decode(b []byte) error {
	// Count the entries first, so that they take one allocation of the
	// right size: a batch of the embedded broker answers one per message.
	n, err := countEntries(b)
	if err != nil {
		return err
	}
	old := r.entries
	r.sendAnswer = sendAnswer{}
	if n > 0 {
		// A recycled response (see sendCall) keeps its entries' memory.
		r.entries = slices.Grow(old[:0], n)
	}
	for len(b) > 0 {
		num, typ, tn, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = b[tn:]
		var vn int
		switch {
		case num == fieldRespStatus && typ == protowire.BytesType:
			var v []byte
			v, vn = consumeLen(b)
			if vn < 0 {
				return truncated("SendMessageResponse.status")
			}
			r.status.set = true
			if err := decodeStatus(v, &r.status); err != nil {
				return err
			}
		case num == fieldRespEntries && typ == protowire.BytesType:
			var v []byte
			v, vn = consumeLen(b)
			if vn < 0 {
				return truncated("SendMessageResponse.entries")
			}
			r.entries = append(r.entries, sendEntry{})
			if err := decodeEntry(v, &r.entries[len(r.entries)-1]); err != nil {
				return err
			}
		default:
			if vn, err = skipField(num, typ, b); err != nil {
				return err
			}
		}
		b = b[vn:]
	}
	return nil
}

// countEntries counts the entries fields of an encoded response, checking
// only its top-level framing.
func countEntries(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		num, typ, tn, err := consumeTag(b)
		if err != nil {
			return 0, err
		}
		b = b[tn:]
		vn, err := skipField(num, typ, b)
		if err != nil {
			return 0, err
		}
		if num == fieldRespEntries && typ == protowire.BytesType {
			n++
		}
		b = b[vn:]
	}
	return n, nil
}

// decodeEntry merges the SendResultEntry encoded in b into e.
func decodeEntry(b []byte, e *sendEntry) error {
	for len(b) > 0 {
		num, typ, tn, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = b[tn:]
		var vn int
		switch {
		case num == fieldEntryStatus && typ == protowire.BytesType:
			var v []byte
			v, vn = consumeLen(b)
			if vn < 0 {
				return truncated("SendResultEntry.status")
			}
			e.status.set = true
			if err := decodeStatus(v, &e.status); err != nil {
				return err
			}
		case num == fieldEntryMessageID && typ == protowire.BytesType:
			// Checked as proto.Unmarshal would, not kept (see sendEntry).
			if _, vn, err = consumeString(b, "SendResultEntry.message_id"); err != nil {
				return err
			}
		case num == fieldEntryTransactionID && typ == protowire.BytesType:
			var v []byte
			if v, vn, err = consumeString(b, "SendResultEntry.transaction_id"); err != nil {
				return err
			}
			e.transactionID = string(v)
		case num == fieldEntryOffset && typ == protowire.VarintType:
			var v uint64
			v, vn = consumeUvarint(b)
			if vn < 0 {
				return truncated("SendResultEntry.offset")
			}
			e.offset = int64(v)
		case num == fieldEntryRecallHandle && typ == protowire.BytesType:
			var v []byte
			if v, vn, err = consumeString(b, "SendResultEntry.recall_handle"); err != nil {
				return err
			}
			e.recallHandle = string(v)
		default:
			if vn, err = skipField(num, typ, b); err != nil {
				return err
			}
		}
		b = b[vn:]
	}
	return nil
}

// decodeStatus merges the Status encoded in b into s.
func decodeStatus(b []byte, s *wireStatus) error {
	for len(b) > 0 {
		num, typ, tn, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = b[tn:]
		var vn int
		switch {
		case num == fieldStatusCode && typ == protowire.VarintType:
			var v uint64
			v, vn = consumeUvarint(b)
			if vn < 0 {
				return truncated("Status.code")
			}
			// An enum is an int32 on the wire; protobuf truncates.
			s.code = rmqpb.Code(int32(v))
		case num == fieldStatusMessage && typ == protowire.BytesType:
			var v []byte
			if v, vn, err = consumeString(b, "Status.message"); err != nil {
				return err
			}
			// Every successful entry carries "OK": share the constant
			// rather than copy it per entry.
			if string(v) == "OK" {
				s.message = "OK"
			} else {
				s.message = string(v)
			}
		default:
			if vn, err = skipField(num, typ, b); err != nil {
				return err
			}
		}
		b = b[vn:]
	}
	return nil
}

// consumeTag reads a field tag (pbcodec.ConsumeTag), also rejecting
// end-group markers without their start (this decoder never descends into
// a group: groups are skipped whole by skipField).
func consumeTag(b []byte) (protowire.Number, protowire.Type, int, error) {
	num, typ, n := pbcodec.ConsumeTag(b)
	if n < 0 {
		return 0, 0, 0, fmt.Errorf("%w: bad field tag", errMalformed)
	}
	if typ == protowire.EndGroupType {
		return 0, 0, 0, fmt.Errorf("%w: unmatched end of group %d", errMalformed, num)
	}
	return num, typ, n, nil
}

// skipField returns the length of a field value to skip.
func skipField(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
	if typ == protowire.BytesType {
		if _, n := consumeLen(b); n >= 0 {
			return n, nil
		}
	}
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, fmt.Errorf("%w: field %d: %w", errMalformed, num, protowire.ParseError(n))
	}
	return n, nil
}

// consumeString reads a length-delimited string field value, checking
// that it is UTF-8 as protobuf requires of proto3 strings.
func consumeString(b []byte, field string) ([]byte, int, error) {
	v, n := consumeLen(b)
	if n < 0 {
		return nil, 0, truncated(field)
	}
	if !utf8.Valid(v) {
		return nil, 0, fmt.Errorf("%w: %s is not valid UTF-8", errMalformed, field)
	}
	return v, n, nil
}

// consumeUvarint is protowire.ConsumeVarint with the one-byte case
// inlined: every tag here, and most lengths and codes, fit in one byte.
func consumeUvarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return protowire.ConsumeVarint(b)
}

// consumeLen is protowire.ConsumeBytes over consumeUvarint: the value of a
// length-delimited field and the bytes it takes, or n < 0 when truncated.
func consumeLen(b []byte) (v []byte, n int) {
	m, n := consumeUvarint(b)
	if n < 0 || m > uint64(len(b)-n) {
		return nil, -1
	}
	return b[n : n+int(m)], n + int(m)
}

func truncated(field string) error {
	return fmt.Errorf("%w: %s is truncated", errMalformed, field)
}
