package store

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strings"
)

// Record framing; the layout is written down in doc.go.
const (
	recordMagic uint32 = 0x544d5131 // "TMQ1"
	blankMagic  uint32 = 0x544d5142 // "TMQB": padding to the end of a segment
	headerSize         = 64
	blankSize          = 8
	// minRecordSize is a record with a one-byte topic and nothing else.
	minRecordSize = headerSize + 2 + 1 + 2 + 2 + 4 + 4
	maxFieldLen   = 1<<16 - 1 // topic, born host and tag are u16-length fields
	maxTopicLen   = 255
)

// Header field offsets.
const (
	offSize      = 0
	offMagic     = 4
	offCRC       = 8
	offQueueID   = 12
	offFlags     = 16
	offQueueOff  = 20
	offLogOff    = 28
	offBornTS    = 36
	offStoreTS   = 44
	offReconsume = 52
	offBatchIdx  = 56
	offBatchCnt  = 60
)

var le = binary.LittleEndian

// crcTable is read-only after init (the Castagnoli polynomial, CRC32C, which
// has hardware support on amd64 and arm64).
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// payloadSize is what MaxMessageSize limits: the bytes a user controls. It
// also returns the longest property key, which validate checks.
func payloadSize(m *Message) (n, longestKey int) {
	n = len(m.Topic) + len(m.BornHost) + len(m.Tag) + len(m.Body)
	for k, v := range m.Properties {
		n += len(k) + len(v) + 6
		longestKey = max(longestKey, len(k))
	}
	return n, longestKey
}

// recordOverhead is what a record adds to its payloadSize: the header and
// the length prefixes of topic, born host, tag, properties and body (each
// property's own prefixes are in payloadSize).
const recordOverhead = headerSize + 2 + 2 + 2 + 4 + 4

// prop is one property of a record being encoded.
type prop struct{ k, v string }

// appendRecord encodes m at the end of dst with the positional fields
// (queue offset, log offset, store timestamp, CRC) left zero; stampRecord
// fills them once the append lock has assigned them.
func appendRecord(dst []byte, m *Message, batchIdx, batchCnt uint32) []byte {
	// Messages carry a handful of properties: one pass over the map
	// collects them on the stack, sorted by key so that the same message
	// always encodes to the same bytes; sizing and writing then read the
	// array instead of the map again.
	var stack [16]prop
	props := stack[:0]
	size := recordOverhead + len(m.Topic) + len(m.BornHost) + len(m.Tag) + len(m.Body)
	for k, v := range m.Properties {
		props = append(props, prop{k, v})
		size += len(k) + len(v) + 6 // as payloadSize counts them
	}
	if len(props) > 1 {
		slices.SortFunc(props, func(a, b prop) int { return strings.Compare(a.k, b.k) })
	}
	start := len(dst)
	dst = slices.Grow(dst, size)[:start+size]
	b := dst[start:]
	clear(b[:headerSize])
	le.PutUint32(b[offSize:], uint32(size))
	le.PutUint32(b[offMagic:], recordMagic)
	le.PutUint32(b[offQueueID:], uint32(m.QueueID))
	le.PutUint32(b[offFlags:], m.Flags)
	le.PutUint64(b[offBornTS:], uint64(m.BornTimestamp))
	le.PutUint32(b[offReconsume:], uint32(m.ReconsumeTimes))
	le.PutUint32(b[offBatchIdx:], batchIdx)
	le.PutUint32(b[offBatchCnt:], batchCnt)
	p := headerSize
	p = putStr16(b, p, m.Topic)
	p = putStr16(b, p, m.BornHost)
	p = putStr16(b, p, m.Tag)
	propsStart := p
	p += 4
	for _, kv := range props {
		p = putStr16(b, p, kv.k)
		le.PutUint32(b[p:], uint32(len(kv.v)))
		p += 4 + copy(b[p+4:], kv.v)
	}
	le.PutUint32(b[propsStart:], uint32(p-propsStart-4))
	le.PutUint32(b[p:], uint32(len(m.Body)))
	p += 4
	copy(b[p:], m.Body)
	return dst
}

func putStr16(b []byte, p int, s string) int {
	le.PutUint16(b[p:], uint16(len(s)))
	return p + 2 + copy(b[p+2:], s)
}

// stampRecord sets the fields known only under the append lock and the CRC.
func stampRecord(rec []byte, queueOffset, logOffset, storeTS int64) {
	le.PutUint64(rec[offQueueOff:], uint64(queueOffset))
	le.PutUint64(rec[offLogOff:], uint64(logOffset))
	le.PutUint64(rec[offStoreTS:], uint64(storeTS))
	le.PutUint32(rec[offCRC:], crc32.Checksum(rec[12:], crcTable))
}

// recordView is a parsed record whose byte fields alias the input.
type recordView struct {
	size                    int
	queueID                 int32
	flags                   uint32
	queueOffset, logOffset  int64
	bornTS, storeTS         int64
	reconsume               int32
	batchIdx, batchCnt      uint32
	topic, host, tag, props []byte
	body                    []byte
}

// peekFrame reads the size and magic at the start of b without checking the
// CRC. It reports blank for segment padding.
func peekFrame(b []byte) (size int, blank bool, err error) {
	if len(b) < blankSize {
		return 0, false, corruptf("%d bytes are too few for a record frame", len(b))
	}
	size = int(le.Uint32(b[offSize:]))
	switch le.Uint32(b[offMagic:]) {
	case blankMagic:
		if size < blankSize {
			return 0, false, corruptf("blank record of size %d", size)
		}
		return size, true, nil
	case recordMagic:
		if size < minRecordSize {
			return 0, false, corruptf("record size %d below minimum %d", size, minRecordSize)
		}
		return size, false, nil
	default:
		return 0, false, corruptf("bad magic %#x", le.Uint32(b[offMagic:]))
	}
}

// parseRecord checks the frame and CRC of the record at the start of b and
// splits it into fields. It never returns a view of a record that fails a
// check.
func parseRecord(b []byte) (recordView, error) {
	var v recordView
	size, blank, err := peekFrame(b)
	if err != nil {
		return v, err
	}
	if blank {
		return v, corruptf("blank padding where a record was expected")
	}
	if size > len(b) {
		return v, corruptf("record size %d beyond the %d bytes available", size, len(b))
	}
	b = b[:size]
	if got, want := crc32.Checksum(b[12:], crcTable), le.Uint32(b[offCRC:]); got != want {
		return v, corruptf("crc %#x, want %#x", got, want)
	}
	v.size = size
	v.queueID = int32(le.Uint32(b[offQueueID:]))
	v.flags = le.Uint32(b[offFlags:])
	v.queueOffset = int64(le.Uint64(b[offQueueOff:]))
	v.logOffset = int64(le.Uint64(b[offLogOff:]))
	v.bornTS = int64(le.Uint64(b[offBornTS:]))
	v.storeTS = int64(le.Uint64(b[offStoreTS:]))
	v.reconsume = int32(le.Uint32(b[offReconsume:]))
	v.batchIdx = le.Uint32(b[offBatchIdx:])
	v.batchCnt = le.Uint32(b[offBatchCnt:])
	if v.batchCnt == 0 || v.batchIdx >= v.batchCnt || v.queueID < 0 || v.queueOffset < 0 || v.logOffset < 0 {
		return v, corruptf("bad record header (queue %d, offset %d, batch %d/%d)", v.queueID, v.queueOffset, v.batchIdx, v.batchCnt)
	}
	p := headerSize
	var ok bool
	if v.topic, p, ok = field(b, p, 2); !ok || len(v.topic) == 0 {
		return v, corruptf("bad topic field")
	}
	if v.host, p, ok = field(b, p, 2); !ok {
		return v, corruptf("bad born host field")
	}
	if v.tag, p, ok = field(b, p, 2); !ok {
		return v, corruptf("bad tag field")
	}
	if v.props, p, ok = field(b, p, 4); !ok {
		return v, corruptf("bad properties field")
	}
	if v.body, p, ok = field(b, p, 4); !ok || p != size {
		return v, corruptf("bad body field")
	}
	if !validProps(v.props) {
		return v, corruptf("bad properties encoding")
	}
	return v, nil
}

// field reads a length-prefixed field (length of lenSize bytes) at p.
func field(b []byte, p, lenSize int) ([]byte, int, bool) {
	if p+lenSize > len(b) {
		return nil, p, false
	}
	var n int
	if lenSize == 2 {
		n = int(le.Uint16(b[p:]))
	} else {
		n = int(le.Uint32(b[p:]))
	}
	p += lenSize
	if n < 0 || n > len(b)-p {
		return nil, p, false
	}
	return b[p : p+n], p + n, true
}

func validProps(b []byte) bool {
	for p := 0; p < len(b); {
		var ok bool
		if _, p, ok = field(b, p, 2); !ok {
			return false
		}
		if _, p, ok = field(b, p, 4); !ok {
			return false
		}
	}
	return true
}

// message copies the view into a StoredMessage that owns its bytes.
func (v *recordView) message() StoredMessage {
	m := StoredMessage{
		Message: Message{
			Topic:          string(v.topic),
			QueueID:        v.queueID,
			Flags:          v.flags,
			BornTimestamp:  v.bornTS,
			BornHost:       string(v.host),
			Tag:            string(v.tag),
			ReconsumeTimes: v.reconsume,
			Body:           bytesOrNil(v.body),
		},
		QueueOffset:    v.queueOffset,
		LogOffset:      v.logOffset,
		StoreTimestamp: v.storeTS,
		Size:           int32(v.size),
	}
	if len(v.props) > 0 {
		m.Properties = map[string]string{}
		for p := 0; p < len(v.props); {
			var k, val []byte
			k, p, _ = field(v.props, p, 2)
			val, p, _ = field(v.props, p, 4)
			m.Properties[string(k)] = string(val)
		}
	}
	return m
}

// bytesOrNil copies b; an empty body reads back as nil.
func bytesOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// DecodeRecord decodes the record at the start of b, checking its frame and
// CRC32C, and returns it with its size. Bytes that fail any check give an
// error wrapping ErrCorrupt; segment padding is reported as corrupt too,
// because a reader never expects it.
func DecodeRecord(b []byte) (StoredMessage, int, error) {
	v, err := parseRecord(b)
	if err != nil {
		return StoredMessage{}, 0, err
	}
	return v.message(), v.size, nil
}

// TagHash is the tag hash kept in consume-queue entries (FNV-1a, 64 bits); an
// empty tag hashes to 0.
func TagHash(tag string) uint64 { return tagHashBytes([]byte(tag)) }

func tagHashBytes(tag []byte) uint64 {
	if len(tag) == 0 {
		return 0
	}
	h := uint64(14695981039346656037)
	for _, c := range tag {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
