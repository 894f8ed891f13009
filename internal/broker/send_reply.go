package broker

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// sendReply is the SendMessageResponse of the wire path, which writes its
// own encoding (pbcodec.WireMessage): a batch answers an entry per message,
// and the generic marshaller measured and wrote them at about the cost of
// decoding the request by hand. The bytes are those proto.Marshal writes
// for the embedded response (fields in number order, proto3 defaults
// omitted). Embedding the generated response keeps it a proto.Message for
// whatever reads it as one (the metrics interceptor's status code); as a
// one-pointer struct it becomes an interface value without an allocation.
type sendReply struct {
	*rmqpb.SendMessageResponse
}

// Field numbers of SendMessageResponse, SendResultEntry and Status.
const (
	fieldResponseStatus  = 1
	fieldResponseEntries = 2

	fieldEntryStatus        = 1
	fieldEntryMessageID     = 2
	fieldEntryTransactionID = 3
	fieldEntryOffset        = 4
	fieldEntryRecallHandle  = 5

	fieldStatusCode    = 1
	fieldStatusMessage = 2
)

// WireSize implements pbcodec.WireMessage.
func (r sendReply) WireSize() int {
	var z statusSizer
	n := 0
	if st := r.GetStatus(); st != nil {
		n += 1 + protowire.SizeBytes(z.size(st))
	}
	for _, e := range r.GetEntries() {
		n += 1 + protowire.SizeBytes(entrySize(e, &z))
	}
	return n
}

// AppendWire implements pbcodec.WireMessage.
func (r sendReply) AppendWire(b []byte) []byte {
	var z statusSizer
	if st := r.GetStatus(); st != nil {
		b = protowire.AppendTag(b, fieldResponseStatus, protowire.BytesType)
		b = appendStatus(b, st, z.size(st))
	}
	for _, e := range r.GetEntries() {
		b = protowire.AppendTag(b, fieldResponseEntries, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entrySize(e, &z)))
		if st := e.GetStatus(); st != nil {
			b = protowire.AppendTag(b, fieldEntryStatus, protowire.BytesType)
			b = appendStatus(b, st, z.size(st))
		}
		b = appendString(b, fieldEntryMessageID, e.GetMessageId())
		b = appendString(b, fieldEntryTransactionID, e.GetTransactionId())
		if off := e.GetOffset(); off != 0 {
			b = protowire.AppendTag(b, fieldEntryOffset, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(off))
		}
		b = appendString(b, fieldEntryRecallHandle, e.GetRecallHandle())
	}
	return b
}

// statusSizer remembers the size of the last Status it measured: the
// entries of a batch share one.
type statusSizer struct {
	st *rmqpb.Status
	n  int
}

func (z *statusSizer) size(st *rmqpb.Status) int {
	if st != z.st {
		z.st, z.n = st, statusSize(st)
	}
	return z.n
}

// enumVarint is how protobuf writes an enum (an int32): sign-extended.
func enumVarint(c rmqpb.Code) uint64 { return uint64(int64(c)) }

func statusSize(st *rmqpb.Status) int {
	n := 0
	if c := st.GetCode(); c != 0 {
		n += 1 + protowire.SizeVarint(enumVarint(c))
	}
	return n + stringSize(st.GetMessage())
}

// appendStatus appends a Status of the given size with its length prefix.
func appendStatus(b []byte, st *rmqpb.Status, size int) []byte {
	b = protowire.AppendVarint(b, uint64(size))
	if c := st.GetCode(); c != 0 {
		b = protowire.AppendTag(b, fieldStatusCode, protowire.VarintType)
		b = protowire.AppendVarint(b, enumVarint(c))
	}
	return appendString(b, fieldStatusMessage, st.GetMessage())
}

func entrySize(e *rmqpb.SendResultEntry, z *statusSizer) int {
	n := 0
	if st := e.GetStatus(); st != nil {
		n += 1 + protowire.SizeBytes(z.size(st))
	}
	n += stringSize(e.GetMessageId()) + stringSize(e.GetTransactionId()) + stringSize(e.GetRecallHandle())
	if off := e.GetOffset(); off != 0 {
		n += 1 + protowire.SizeVarint(uint64(off))
	}
	return n
}

// stringSize is the size of a proto3 string field numbered below 16 (one
// tag byte), 0 when it is empty and so not written.
func stringSize(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
