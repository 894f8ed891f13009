package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// The binary ("ROCKETMQ") header serialization.

func appendBinaryHeader(b []byte, h *Header) ([]byte, error) {
	if h.Code != int32(int16(h.Code)) || h.Version != int32(int16(h.Version)) {
		// The binary form has 16 bits for each (RocketMQ truncates; a
		// truncated code would name another request).
		return b, fmt.Errorf("remoting: code %d or version %d does not fit the binary header's 16 bits, use JSON", h.Code, h.Version)
	}
	ext := 0
	for k, v := range h.Ext {
		if len(k) > 0xFFFF {
			return b, fmt.Errorf("remoting: extFields key of %d bytes", len(k))
		}
		ext += 2 + len(k) + 4 + len(v)
	}
	b = slices.Grow(b, 2+1+2+4+4+4+len(h.Remark)+4+ext)
	b = binary.BigEndian.AppendUint16(b, uint16(int16(h.Code)))
	b = append(b, byte(h.Language))
	b = binary.BigEndian.AppendUint16(b, uint16(int16(h.Version)))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Opaque))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Flag))
	b = binary.BigEndian.AppendUint32(b, uint32(len(h.Remark)))
	b = append(b, h.Remark...)
	b = binary.BigEndian.AppendUint32(b, uint32(ext))
	// Map order: RocketMQ reads the pairs into a HashMap.
	for k, v := range h.Ext {
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b, nil
}

// reader reads big-endian fields, remembering the first shortfall.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = malformed("%s needs %d bytes, %d left", what, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u16(what string) uint16 {
	if v := r.take(2, what); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if v := r.take(4, what); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if v := r.take(8, what); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) u8(what string) byte {
	if v := r.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func decodeBinaryHeader(b []byte) (*Header, error) {
	r := &reader{b: b}
	h := &Header{}
	h.Code = int32(int16(r.u16("code")))
	h.Language = int8(r.u8("language"))
	h.Version = int32(int16(r.u16("version")))
	h.Opaque = int32(r.u32("opaque"))
	h.Flag = int32(r.u32("flag"))
	rl := r.u32("remark length")
	if rl > 0 {
		h.Remark = string(r.take(int(int32(rl)), "remark"))
	}
	el := r.u32("extFields length")
	ext := r.take(int(int32(el)), "extFields")
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, malformed("%d bytes after the binary header", len(r.b))
	}
	if len(ext) > 0 {
		h.Ext = map[string]string{}
		er := &reader{b: ext}
		for len(er.b) > 0 && er.err == nil {
			k := er.take(int(er.u16("key length")), "key")
			v := er.take(int(int32(er.u32("value length"))), "value")
			if er.err == nil {
				h.Ext[string(k)] = string(v)
			}
		}
		if er.err != nil {
			return nil, er.err
		}
	}
	return h, nil
}
