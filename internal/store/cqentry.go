package store

// Consume-queue entry layouts; see doc.go.
const (
	cqEntrySize      = 20 // log offset 8 | size 4 | tag hash 8
	batchCQEntrySize = 40 // log offset 8 | size 4 | tag hash 8 | store ts 8 | base offset 8 | count 4
	maxLogOffset     = 1 << 56
)

// CQEntry is one consume-queue entry: where a message (or, in a BatchCQ, a
// run of messages) lives in the commit log.
type CQEntry struct {
	LogOffset int64
	Size      int32
	TagHash   uint64
	// Set for BatchCQ entries only.
	StoreTimestamp int64
	BaseOffset     int64
	Count          int32
}

func putCQEntry(b []byte, e CQEntry) {
	le.PutUint64(b[0:], uint64(e.LogOffset))
	le.PutUint32(b[8:], uint32(e.Size))
	le.PutUint64(b[12:], e.TagHash)
}

func putBatchCQEntry(b []byte, e CQEntry) {
	putCQEntry(b, e)
	le.PutUint64(b[20:], uint64(e.StoreTimestamp))
	le.PutUint64(b[28:], uint64(e.BaseOffset))
	le.PutUint32(b[36:], uint32(e.Count))
}

// DecodeCQEntry decodes a 20-byte consume-queue entry. An entry that cannot
// point at a record (wrong length, negative or huge offset, size below the
// smallest record, all zeros as left by a torn write) wraps ErrCorrupt.
func DecodeCQEntry(b []byte) (CQEntry, error) {
	if len(b) != cqEntrySize {
		return CQEntry{}, corruptf("consume-queue entry of %d bytes, want %d", len(b), cqEntrySize)
	}
	e := CQEntry{
		LogOffset: int64(le.Uint64(b[0:])),
		Size:      int32(le.Uint32(b[8:])),
		TagHash:   le.Uint64(b[12:]),
	}
	if e.LogOffset < 0 || e.LogOffset >= maxLogOffset || e.Size < minRecordSize {
		return CQEntry{}, corruptf("consume-queue entry (log offset %d, size %d)", e.LogOffset, e.Size)
	}
	return e, nil
}

// DecodeBatchCQEntry decodes a 40-byte BatchCQ entry, with the same checks as
// DecodeCQEntry plus a positive count and a size that holds count records.
func DecodeBatchCQEntry(b []byte) (CQEntry, error) {
	if len(b) != batchCQEntrySize {
		return CQEntry{}, corruptf("batch consume-queue entry of %d bytes, want %d", len(b), batchCQEntrySize)
	}
	e, err := DecodeCQEntry(b[:cqEntrySize])
	if err != nil {
		return CQEntry{}, err
	}
	e.StoreTimestamp = int64(le.Uint64(b[20:]))
	e.BaseOffset = int64(le.Uint64(b[28:]))
	e.Count = int32(le.Uint32(b[36:]))
	if e.BaseOffset < 0 || e.Count <= 0 || int64(e.Size) < int64(e.Count)*minRecordSize {
		return CQEntry{}, corruptf("batch consume-queue entry (base %d, count %d, size %d)", e.BaseOffset, e.Count, e.Size)
	}
	return e, nil
}
