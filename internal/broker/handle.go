package broker

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// errBadHandle: a receipt handle that does not decode. The RPCs answer it
// with INTERNAL_SERVER_ERROR, as the proxy does (see resolveHandle).
var errBadHandle = errors.New("malformed receipt handle")

const handleVersion = 1

// receipt is what a receipt handle carries. The handle is opaque to clients:
// base64url of a versioned binary record with a CRC32 trailer, so garbage
// is told apart from a real handle before anything is looked up.
//
// The nonce names one delivery: every pop and every ChangeInvisibleDuration
// makes a new one, and the broker accepts a handle only while its nonce is
// the one recorded for the message in flight. A handle from an earlier
// delivery, or for a message already acked, is therefore stale.
type receipt struct {
	broker   string
	topic    string
	queueID  int32
	offset   int64
	nonce    uint64
	popTime  int64 // unix ms of the delivery
	deadline int64 // unix ms when the message becomes visible again (at issue)
}

func (r receipt) encode() string {
	b := make([]byte, 0, 48+len(r.broker)+len(r.topic))
	b = append(b, handleVersion)
	b = binary.AppendUvarint(b, uint64(len(r.broker)))
	b = append(b, r.broker...)
	b = binary.AppendUvarint(b, uint64(len(r.topic)))
	b = append(b, r.topic...)
	b = binary.AppendVarint(b, int64(r.queueID))
	b = binary.AppendVarint(b, r.offset)
	b = binary.BigEndian.AppendUint64(b, r.nonce)
	b = binary.AppendVarint(b, r.popTime)
	b = binary.AppendVarint(b, r.deadline)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

// maxHandleLen bounds what decodeReceipt looks at; real handles are short.
const maxHandleLen = 1024

func decodeReceipt(s string) (receipt, error) {
	if len(s) == 0 || len(s) > maxHandleLen {
		return receipt{}, errBadHandle
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1+4 {
		return receipt{}, errBadHandle
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum || body[0] != handleVersion {
		return receipt{}, errBadHandle
	}
	d := decoder{b: body[1:]}
	var r receipt
	r.broker = d.str()
	r.topic = d.str()
	q := d.varint()
	r.queueID = int32(q)
	r.offset = d.varint()
	r.nonce = d.u64()
	r.popTime = d.varint()
	r.deadline = d.varint()
	if d.bad || len(d.b) != 0 || int64(r.queueID) != q || r.queueID < 0 || r.offset < 0 {
		return receipt{}, errBadHandle
	}
	return r, nil
}

// decoder reads a handle body; any short or malformed read sets bad.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		d.b = nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		d.b = nil
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}
