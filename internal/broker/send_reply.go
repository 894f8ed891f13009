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
// whatever reads it as one (the metrics interceptor's status code).
//
// The reply of an appended request carries its outcome instead of entries:
// the entries (one per message, all with the outcome's status, the
// message's id and first + i as offset) are written from it, with the same
// bytes the generated entries would give, and the response's Entries stay
// empty.
type sendReply struct {
	*rmqpb.SendMessageResponse
	appended *sendOutcome
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
	if o := r.appended; o != nil {
		st := z.size(o.status)
		for i, id := range o.ids {
			n += 1 + protowire.SizeBytes(partsSize(o.status != nil, st, id, "", o.first+int64(i), ""))
		}
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
		b = appendEntry(b, e.GetStatus(), &z, e.GetMessageId(), e.GetTransactionId(), e.GetOffset(), e.GetRecallHandle())
	}
	if o := r.appended; o != nil {
		for i, id := range o.ids {
			b = appendEntry(b, o.status, &z, id, "", o.first+int64(i), "")
		}
	}
	return b
}

// appendEntry appends one SendResultEntry field (st may be nil).
func appendEntry(b []byte, st *rmqpb.Status, z *statusSizer, id, tx string, off int64, recall string) []byte {
	stSize := 0
	if st != nil {
		stSize = z.size(st)
	}
	b = protowire.AppendTag(b, fieldResponseEntries, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(partsSize(st != nil, stSize, id, tx, off, recall)))
	if st != nil {
		b = protowire.AppendTag(b, fieldEntryStatus, protowire.BytesType)
		b = appendStatus(b, st, stSize)
	}
	b = appendString(b, fieldEntryMessageID, id)
	b = appendString(b, fieldEntryTransactionID, tx)
	if off != 0 {
		b = protowire.AppendTag(b, fieldEntryOffset, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(off))
	}
	return appendString(b, fieldEntryRecallHandle, recall)
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
	st, stSize := e.GetStatus(), 0
	if st != nil {
		stSize = z.size(st)
	}
	return partsSize(st != nil, stSize, e.GetMessageId(), e.GetTransactionId(), e.GetOffset(), e.GetRecallHandle())
}

// partsSize is the size of a SendResultEntry with these fields (a status of
// stSize bytes when hasStatus).
func partsSize(hasStatus bool, stSize int, id, tx string, off int64, recall string) int {
	n := 0
	if hasStatus {
		n += 1 + protowire.SizeBytes(stSize)
	}
	n += stringSize(id) + stringSize(tx) + stringSize(recall)
	if off != 0 {
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
