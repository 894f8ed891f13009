package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
)

// Sentinel errors of the codec.
var (
	// ErrMalformed: bytes that are not a valid frame or header.
	ErrMalformed = errors.New("remoting: malformed frame")
	// ErrFrameTooLarge: a frame length over the reader's limit.
	ErrFrameTooLarge = errors.New("remoting: frame too large")
)

// DefaultMaxFrame is RocketMQ's default frame limit (16 MiB).
const DefaultMaxFrame = 16 << 20

// SerializeType names a header serialization.
type SerializeType byte

const (
	JSON     SerializeType = 0
	RocketMQ SerializeType = 1
)

// Flag bits of a command.
const (
	FlagResponse int32 = 1 << 0
	FlagOneway   int32 = 1 << 1
)

// Language codes (LanguageCode.java).
const (
	LangJava int8 = 0
	LangGo   int8 = 9
)

var langNames = map[string]int8{
	"JAVA": 0, "CPP": 1, "DOTNET": 2, "PYTHON": 3, "DELPHI": 4, "ERLANG": 5,
	"RUBY": 6, "OTHER": 7, "HTTP": 8, "GO": 9, "PHP": 10, "OMS": 11, "RUST": 12,
}

func langName(l int8) string {
	for k, v := range langNames {
		if v == l {
			return k
		}
	}
	return "OTHER"
}

// Header is a RemotingCommand without its body.
type Header struct {
	Code     int32
	Language int8
	Version  int32
	Opaque   int32
	Flag     int32
	Remark   string
	Ext      map[string]string
}

// IsResponse reports the response bit.
func (h *Header) IsResponse() bool { return h.Flag&FlagResponse != 0 }

// IsOneway reports the oneway bit.
func (h *Header) IsOneway() bool { return h.Flag&FlagOneway != 0 }

// Command is one decoded frame.
type Command struct {
	Header
	Serialize SerializeType
	Body      []byte
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// EncodeHeader serializes h.
func EncodeHeader(h *Header, t SerializeType) ([]byte, error) {
	switch t {
	case JSON:
		return encodeJSONHeader(h)
	case RocketMQ:
		return encodeBinaryHeader(h)
	}
	return nil, fmt.Errorf("remoting: unknown serialize type %d", t)
}

// AppendFrame appends the whole frame (length prefix included) of a command.
func AppendFrame(dst []byte, h *Header, body []byte, t SerializeType) ([]byte, error) {
	hb, err := EncodeHeader(h, t)
	if err != nil {
		return dst, err
	}
	if len(hb) >= 1<<24 {
		return dst, fmt.Errorf("%w: header of %d bytes", ErrFrameTooLarge, len(hb))
	}
	total := 4 + len(hb) + len(body)
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(t)<<24|uint32(len(hb)))
	dst = append(dst, hb...)
	return append(dst, body...), nil
}

// DecodeFrame decodes one whole frame, length prefix included. The body is a
// view of b.
func DecodeFrame(b []byte, max int) (*Command, error) {
	if len(b) < 4 {
		return nil, malformed("frame of %d bytes has no length", len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if max > 0 && int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	if int64(n) != int64(len(b)-4) {
		return nil, malformed("frame length %d, %d bytes follow", n, len(b)-4)
	}
	return decodePayload(b[4:])
}

// ReadFrame reads one frame from r. The returned command owns its memory.
func ReadFrame(r io.Reader, max int) (*Command, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(lb[:])
	if max <= 0 {
		max = DefaultMaxFrame
	}
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return decodePayload(buf)
}

// decodePayload decodes what follows the length prefix.
func decodePayload(b []byte) (*Command, error) {
	if len(b) < 4 {
		return nil, malformed("payload of %d bytes has no header length", len(b))
	}
	mark := binary.BigEndian.Uint32(b)
	t := SerializeType(mark >> 24)
	hl := int(mark & 0xFFFFFF)
	if hl > len(b)-4 {
		return nil, malformed("header length %d, %d bytes follow", hl, len(b)-4)
	}
	h, err := DecodeHeader(b[4:4+hl], t)
	if err != nil {
		return nil, err
	}
	c := &Command{Header: *h, Serialize: t}
	if body := b[4+hl:]; len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

// DecodeHeader decodes a header of serialization t.
func DecodeHeader(b []byte, t SerializeType) (*Header, error) {
	switch t {
	case JSON:
		return decodeJSONHeader(b)
	case RocketMQ:
		return decodeBinaryHeader(b)
	}
	return nil, malformed("unknown serialize type %d", t)
}

type jsonHeader struct {
	Code      int32             `json:"code"`
	Language  json.RawMessage   `json:"language,omitempty"`
	Version   int32             `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    *string           `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
	Serialize string            `json:"serializeTypeCurrentRPC,omitempty"`
}

func encodeJSONHeader(h *Header) ([]byte, error) {
	j := jsonHeader{Code: h.Code, Version: h.Version, Opaque: h.Opaque, Flag: h.Flag, ExtFields: h.Ext, Serialize: "JSON"}
	j.Language = json.RawMessage(strconv.Quote(langName(h.Language)))
	if h.Remark != "" {
		r := h.Remark
		j.Remark = &r
	}
	return json.Marshal(&j)
}

func decodeJSONHeader(b []byte) (*Header, error) {
	var j struct {
		Code      int32           `json:"code"`
		Language  json.RawMessage `json:"language"`
		Version   int32           `json:"version"`
		Opaque    int32           `json:"opaque"`
		Flag      int32           `json:"flag"`
		Remark    *string         `json:"remark"`
		ExtFields map[string]any  `json:"extFields"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, malformed("json header: %v", err)
	}
	h := &Header{Code: j.Code, Version: j.Version, Opaque: j.Opaque, Flag: j.Flag}
	if j.Remark != nil {
		h.Remark = *j.Remark
	}
	if l := bytes.TrimSpace(j.Language); len(l) > 0 && string(l) != "null" {
		var name string
		var num int8
		switch {
		case json.Unmarshal(l, &name) == nil:
			v, ok := langNames[name]
			if !ok {
				v = langNames["OTHER"]
			}
			h.Language = v
		case json.Unmarshal(l, &num) == nil:
			h.Language = num
		default:
			return nil, malformed("json header: language %s", l)
		}
	}
	if len(j.ExtFields) > 0 {
		h.Ext = make(map[string]string, len(j.ExtFields))
		for k, v := range j.ExtFields {
			// fastjson writes the values as strings; tolerate scalars.
			switch v := v.(type) {
			case string:
				h.Ext[k] = v
			case float64:
				h.Ext[k] = strconv.FormatFloat(v, 'f', -1, 64)
			case bool:
				h.Ext[k] = strconv.FormatBool(v)
			case nil:
			default:
				return nil, malformed("json header: extFields[%q] is not a scalar", k)
			}
		}
	}
	return h, nil
}

func encodeBinaryHeader(h *Header) ([]byte, error) {
	if h.Code != int32(int16(h.Code)) || h.Version != int32(int16(h.Version)) {
		// The binary form has 16 bits for each (RocketMQ truncates; a
		// truncated code would name another request).
		return nil, fmt.Errorf("remoting: code %d or version %d does not fit the binary header's 16 bits, use JSON", h.Code, h.Version)
	}
	keys := make([]string, 0, len(h.Ext))
	for k := range h.Ext {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	n := 2 + 1 + 2 + 4 + 4 + 4 + len(h.Remark) + 4
	for _, k := range keys {
		if len(k) > 0xFFFF {
			return nil, fmt.Errorf("remoting: extFields key of %d bytes", len(k))
		}
		n += 2 + len(k) + 4 + len(h.Ext[k])
	}
	b := make([]byte, 0, n)
	b = binary.BigEndian.AppendUint16(b, uint16(int16(h.Code)))
	b = append(b, byte(h.Language))
	b = binary.BigEndian.AppendUint16(b, uint16(int16(h.Version)))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Opaque))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Flag))
	b = binary.BigEndian.AppendUint32(b, uint32(len(h.Remark)))
	b = append(b, h.Remark...)
	ext := 0
	for _, k := range keys {
		ext += 2 + len(k) + 4 + len(h.Ext[k])
	}
	b = binary.BigEndian.AppendUint32(b, uint32(ext))
	for _, k := range keys {
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(h.Ext[k])))
		b = append(b, h.Ext[k]...)
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
