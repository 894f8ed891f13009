package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
)

const (
	nameSep  = '\u0001'
	valueSep = '\u0002'
)

// EncodeProperties writes properties as RocketMQ does: name \u0001 value
// \u0002, repeated, in key order (RocketMQ uses its map's order; the order
// carries no meaning). A key or value holding a separator is refused.
func EncodeProperties(props map[string]string) (string, error) {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := props[k]
		if strings.ContainsAny(k, "\u0001\u0002") || strings.ContainsAny(v, "\u0001\u0002") {
			return "", fmt.Errorf("%w: property %q holds a separator character", ErrMalformed, k)
		}
		b.WriteString(k)
		b.WriteByte(nameSep)
		b.WriteString(v)
		b.WriteByte(valueSep)
	}
	return b.String(), nil
}

// DecodeProperties reads the properties string. A pair without a name
// separator is skipped, as RocketMQ does.
func DecodeProperties(s string) map[string]string {
	m := map[string]string{}
	for len(s) > 0 {
		item := s
		if i := strings.IndexByte(s, valueSep); i >= 0 {
			item, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if j := strings.IndexByte(item, nameSep); j >= 0 {
			m[item[:j]] = item[j+1:]
		}
	}
	return m
}

// BatchMessage is one message of a batch body.
type BatchMessage struct {
	Flag       int32
	Body       []byte
	Properties string // encoded, see EncodeProperties
}

// AppendBatch appends messages in the batch body encoding
// (MessageDecoder.encodeMessages): per message total size, magic 0, body CRC
// 0, flag, body length, body, short properties length, properties.
func AppendBatch(dst []byte, msgs []BatchMessage) ([]byte, error) {
	n := 0
	for i, m := range msgs {
		if len(m.Properties) > 0x7FFF {
			return dst, fmt.Errorf("%w: message %d: properties of %d bytes exceed a short", ErrMalformed, i, len(m.Properties))
		}
		n += 4 + 4 + 4 + 4 + 4 + len(m.Body) + 2 + len(m.Properties)
	}
	dst = slices.Grow(dst, n) // one allocation, not a doubling per message
	for _, m := range msgs {
		total := 4 + 4 + 4 + 4 + 4 + len(m.Body) + 2 + len(m.Properties)
		dst = binary.BigEndian.AppendUint32(dst, uint32(total))
		dst = binary.BigEndian.AppendUint32(dst, 0)
		dst = binary.BigEndian.AppendUint32(dst, 0)
		dst = binary.BigEndian.AppendUint32(dst, uint32(m.Flag))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Body)))
		dst = append(dst, m.Body...)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Properties)))
		dst = append(dst, m.Properties...)
	}
	return dst, nil
}

// DecodeBatch reads a batch body. Bodies are views of b.
func DecodeBatch(b []byte) ([]BatchMessage, error) {
	var out []BatchMessage
	for len(b) > 0 {
		r := &reader{b: b}
		total := int(int32(r.u32("total size")))
		if r.err != nil {
			return nil, r.err
		}
		if total < 22 || total > len(b) {
			return nil, malformed("batch message %d: total size %d, %d bytes left", len(out), total, len(b))
		}
		r = &reader{b: b[4:total]}
		r.u32("magic")
		r.u32("body crc")
		flag := int32(r.u32("flag"))
		body := r.take(int(int32(r.u32("body length"))), "body")
		props := r.take(int(r.u16("properties length")), "properties")
		if r.err != nil {
			return nil, fmt.Errorf("batch message %d: %w", len(out), r.err)
		}
		if len(r.b) != 0 {
			return nil, malformed("batch message %d: %d bytes after properties", len(out), len(r.b))
		}
		out = append(out, BatchMessage{Flag: flag, Body: body, Properties: string(props)})
		b = b[total:]
	}
	return out, nil
}

// CheckProperty returns the error EncodeProperties gives a pair of which
// the name or the value holds a separator character, nil for a pair it
// accepts.
func CheckProperty(name, value string) error {
	if hasSeparator(name) || hasSeparator(value) {
		return fmt.Errorf("%w: property %q holds a separator character", ErrMalformed, name)
	}
	return nil
}

// hasSeparator reports whether s holds \u0001 or \u0002.
func hasSeparator(s string) bool {
	return strings.IndexByte(s, nameSep) >= 0 || strings.IndexByte(s, valueSep) >= 0
}

// AppendProperty appends one pair as EncodeProperties writes it (name
// \u0001 value \u0002); the caller has checked it (CheckProperty) and
// writes the pairs in key order.
func AppendProperty(dst []byte, name, value string) []byte {
	dst = append(dst, name...)
	dst = append(dst, nameSep)
	dst = append(dst, value...)
	return append(dst, valueSep)
}

// batchFixed is the size of a batch message's fields other than its body
// and its properties.
const batchFixed = 4 + 4 + 4 + 4 + 4 + 2

// StartBatchMessage appends the start of one message of a batch body, the
// same bytes AppendBatch writes for it up to its properties; the caller
// appends the encoded properties (AppendProperty) and then calls
// FinishBatchMessage with start, the length of dst before this call. So a
// batch body is encoded in one buffer, with no string per message.
func StartBatchMessage(dst []byte, flag int32, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, 0) // total size, set by FinishBatchMessage
	dst = binary.BigEndian.AppendUint32(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(flag))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	dst = append(dst, body...)
	return binary.BigEndian.AppendUint16(dst, 0) // properties length, set by FinishBatchMessage
}

// FinishBatchMessage writes the sizes of the message begun at start (see
// StartBatchMessage), message i of its batch, once its properties are
// appended. Properties longer than a short are refused with the error
// AppendBatch gives them.
func FinishBatchMessage(dst []byte, start, i int) error {
	bodyLen := int(binary.BigEndian.Uint32(dst[start+16:]))
	pl := len(dst) - start - batchFixed - bodyLen
	if pl > 0x7FFF {
		return fmt.Errorf("%w: message %d: properties of %d bytes exceed a short", ErrMalformed, i, pl)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	binary.BigEndian.PutUint16(dst[start+batchFixed-2+bodyLen:], uint16(pl))
	return nil
}

// Property is one decoded property pair.
type Property struct{ Name, Value string }

// AppendPropertyPairs appends the pairs of a properties string to dst, the
// pairs DecodeProperties puts in its map, with no map: a pair without a
// name separator is skipped and, of pairs of one name, one is kept with
// the last value. Names and values are views of s.
func AppendPropertyPairs(dst []Property, s string) []Property {
	start := len(dst)
	for len(s) > 0 {
		item := s
		if i := strings.IndexByte(s, valueSep); i >= 0 {
			item, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		j := strings.IndexByte(item, nameSep)
		if j < 0 {
			continue
		}
		p := Property{Name: item[:j], Value: item[j+1:]}
		if len(dst)-start > 32 {
			return appendPairsIndexed(dst, start, p, s)
		}
		found := false
		for k := start; k < len(dst) && !found; k++ {
			if dst[k].Name == p.Name {
				dst[k].Value, found = p.Value, true
			}
		}
		if !found {
			dst = append(dst, p)
		}
	}
	return dst
}

// appendPairsIndexed goes on with AppendPropertyPairs past its first pairs
// with an index of names, so that many properties cost no quadratic search.
func appendPairsIndexed(dst []Property, start int, p Property, s string) []Property {
	at := make(map[string]int, 2*(len(dst)-start))
	for k := start; k < len(dst); k++ {
		at[dst[k].Name] = k
	}
	for {
		if k, ok := at[p.Name]; ok {
			dst[k].Value = p.Value
		} else {
			at[p.Name] = len(dst)
			dst = append(dst, p)
		}
		for {
			if len(s) == 0 {
				return dst
			}
			item := s
			if i := strings.IndexByte(s, valueSep); i >= 0 {
				item, s = s[:i], s[i+1:]
			} else {
				s = ""
			}
			if j := strings.IndexByte(item, nameSep); j >= 0 {
				p = Property{Name: item[:j], Value: item[j+1:]}
				break
			}
		}
	}
}
