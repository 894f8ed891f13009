package store

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder: it must not
// panic, and whatever it accepts must re-encode to the same bytes (so no
// corrupt record can pass as a valid one with different content).
func FuzzDecodeRecord(f *testing.F) {
	for _, m := range []Message{
		{Topic: "t", Body: []byte("x")},
		{Topic: "topic", QueueID: 3, Flags: 9, BornTimestamp: 5, BornHost: "h:1", Tag: "tag", ReconsumeTimes: 2,
			Properties: map[string]string{"a": "1", "bb": ""}, Body: []byte("hello")},
	} {
		rec := appendRecord(nil, &m, 0, 1)
		stampRecord(rec, 7, 1024, 99)
		f.Add(rec)
		f.Add(rec[:len(rec)-1])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		sm, n, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if n < minRecordSize || n > len(b) {
			t.Fatalf("accepted size %d of %d bytes", n, len(b))
		}
		if sm.Size != int32(n) {
			t.Fatalf("size %d, consumed %d", sm.Size, n)
		}
		v, _ := parseRecord(b)
		re := appendRecord(nil, &sm.Message, v.batchIdx, v.batchCnt)
		stampRecord(re, sm.QueueOffset, sm.LogOffset, sm.StoreTimestamp)
		// Property order on disk is sorted when we write it; a foreign
		// order with the same content is still a valid record, so compare
		// only when the lengths agree and the layout is canonical.
		if len(re) == n && !bytes.Equal(re, b[:n]) && sortedProps(v.props) {
			t.Fatalf("decoded record does not re-encode to its bytes")
		}
	})
}

func sortedProps(b []byte) bool {
	var prev []byte
	for p := 0; p < len(b); {
		var k []byte
		k, p, _ = field(b, p, 2)
		_, p, _ = field(b, p, 4)
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return false
		}
		prev = k
	}
	return true
}

// FuzzDecodeCQEntry feeds arbitrary bytes to both consume-queue entry
// decoders: no panic, and an accepted entry re-encodes to its bytes.
func FuzzDecodeCQEntry(f *testing.F) {
	n := make([]byte, cqEntrySize)
	putCQEntry(n, CQEntry{LogOffset: 4096, Size: 200, TagHash: TagHash("a")})
	f.Add(n)
	bt := make([]byte, batchCQEntrySize)
	putBatchCQEntry(bt, CQEntry{LogOffset: 64, Size: 900, TagHash: 1, StoreTimestamp: 5, BaseOffset: 10, Count: 4})
	f.Add(bt)
	f.Add(make([]byte, cqEntrySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := DecodeCQEntry(b); err == nil {
			out := make([]byte, cqEntrySize)
			putCQEntry(out, e)
			if !bytes.Equal(out, b) {
				t.Fatalf("entry does not re-encode")
			}
		}
		if e, err := DecodeBatchCQEntry(b); err == nil {
			out := make([]byte, batchCQEntrySize)
			putBatchCQEntry(out, e)
			if !bytes.Equal(out, b) || e.Count <= 0 {
				t.Fatalf("batch entry does not re-encode")
			}
		}
	})
}
