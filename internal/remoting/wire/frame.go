package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
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

// langByCode is langNames inverted (LanguageCode's ordinals are 0..12).
var langByCode = [...]string{"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG",
	"RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST"}

func langName(l int8) string {
	if l >= 0 && int(l) < len(langByCode) {
		return langByCode[l]
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
	return appendHeader(nil, h, t)
}

func appendHeader(dst []byte, h *Header, t SerializeType) ([]byte, error) {
	switch t {
	case JSON:
		return appendJSONHeader(dst, h), nil
	case RocketMQ:
		return appendBinaryHeader(dst, h)
	}
	return dst, fmt.Errorf("remoting: unknown serialize type %d", t)
}

// AppendFrame appends the whole frame (length prefix included) of a command.
func AppendFrame(dst []byte, h *Header, body []byte, t SerializeType) ([]byte, error) {
	dst, err := AppendFrameHead(dst, h, len(body), t)
	if err != nil {
		return dst, err
	}
	return append(dst, body...), nil
}

// AppendFrameHead appends a frame up to its body: the length prefix (which
// counts a body of bodyLen bytes to follow), the serialization mark and
// the header. The header is encoded straight into dst. On error dst is
// returned as it was.
func AppendFrameHead(dst []byte, h *Header, bodyLen int, t SerializeType) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	out, err := appendHeader(dst, h, t)
	if err != nil {
		return dst[:start], err
	}
	hl := len(out) - start - 8
	if hl >= 1<<24 {
		return dst[:start], fmt.Errorf("%w: header of %d bytes", ErrFrameTooLarge, hl)
	}
	total := int64(4 + hl + bodyLen)
	if total > math.MaxUint32 {
		return dst[:start], fmt.Errorf("%w: frame of %d bytes", ErrFrameTooLarge, total)
	}
	binary.BigEndian.PutUint32(out[start:], uint32(total))
	binary.BigEndian.PutUint32(out[start+4:], uint32(t)<<24|uint32(hl))
	return out, nil
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

// appendJSONHeader writes what fastjson writes for a RemotingCommand
// (the fields RocketMQ reads; extFields in map order, which no reader
// depends on) without reflection.
func appendJSONHeader(b []byte, h *Header) []byte {
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(h.Code), 10)
	b = append(b, `,"language":"`...)
	b = append(b, langName(h.Language)...)
	b = append(b, `","version":`...)
	b = strconv.AppendInt(b, int64(h.Version), 10)
	b = append(b, `,"opaque":`...)
	b = strconv.AppendInt(b, int64(h.Opaque), 10)
	b = append(b, `,"flag":`...)
	b = strconv.AppendInt(b, int64(h.Flag), 10)
	if h.Remark != "" {
		b = append(b, `,"remark":`...)
		b = appendJSONString(b, h.Remark)
	}
	if len(h.Ext) > 0 {
		b = append(b, `,"extFields":{`...)
		first := true
		for k, v := range h.Ext {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, v)
		}
		b = append(b, '}')
	}
	return append(b, `,"serializeTypeCurrentRPC":"JSON"}`...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json does
// (without its HTML escaping): control characters escaped, each byte of
// invalid UTF-8 replaced by U+FFFD, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// decodeJSONHeader reads a JSON header: by hand when it has the shape
// servers write (decodeJSONHeaderFast), else with encoding/json, whose
// reading is the reference (FuzzJSONHeaderFastPath checks the two agree).
func decodeJSONHeader(b []byte) (*Header, error) {
	if h, ok := decodeJSONHeaderFast(b); ok {
		return h, nil
	}
	return decodeJSONHeaderSlow(b)
}

func decodeJSONHeaderSlow(b []byte) (*Header, error) {
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

// jscan reads the simple JSON of a header. Each method reports false for
// anything it does not read the way encoding/json does, and the caller
// then leaves the input to encoding/json.
type jscan struct {
	b   []byte
	src string // b as one string: unescaped strings are slices of it
	i   int
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// lit consumes c after whitespace.
func (s *jscan) lit(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek returns the next byte after whitespace (0 at the end).
func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str reads a string in valid UTF-8, unescaping as encoding/json does
// (a lone or broken surrogate becomes U+FFFD).
func (s *jscan) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	start := s.i + 1
	j := start
	for j < len(s.b) && s.b[j] != '"' && s.b[j] != '\\' && s.b[j] >= 0x20 {
		j++
	}
	if j < len(s.b) && s.b[j] == '"' {
		v := s.src[start:j]
		if !utf8.ValidString(v) {
			return "", false
		}
		s.i = j + 1
		return v, true
	}
	out := make([]byte, 0, j-start+16)
	out = append(out, s.b[start:j]...)
	for j < len(s.b) {
		c := s.b[j]
		switch {
		case c == '"':
			if !utf8.Valid(out) {
				return "", false
			}
			s.i = j + 1
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(s.b) {
			return "", false
		}
		switch e := s.b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s.b[j+2:])
			if !ok {
				return "", false
			}
			j += 6
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(s.b[min(j+2, len(s.b)):]); ok && j+1 < len(s.b) && s.b[j] == '\\' && s.b[j+1] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						out = utf8.AppendRune(out, d)
						j += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", false
		}
		j += 2
	}
	return "", false
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// word consumes a literal (null, true, false).
func (s *jscan) word(w string) bool {
	s.ws()
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// integer reads a JSON integer (-?(0|[1-9][0-9]*)) that fits bits.
func (s *jscan) integer(bits int) (int64, bool) {
	s.ws()
	j := s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	d := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == d || (s.b[d] == '0' && j-d > 1) {
		return 0, false
	}
	if j < len(s.b) {
		switch s.b[j] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(s.b[s.i:j]), 10, bits)
	if err != nil {
		return 0, false
	}
	s.i = j
	return v, true
}

var jsonHeaderKeys = [...]string{"code", "language", "version", "opaque", "flag", "remark", "extFields"}

// decodeJSONHeaderFast reads a header of the usual shape: an object of the
// known keys, each once, with integers, simple strings and null, plus
// unknown keys whose values are simple strings (serializeTypeCurrentRPC);
// extFields values simple strings, booleans or null. ok is false for
// anything else.
func decodeJSONHeaderFast(b []byte) (*Header, bool) {
	s := &jscan{b: b, src: string(b)}
	if !s.lit('{') {
		return nil, false
	}
	h := &Header{}
	var seen uint32 // bit i: jsonHeaderKeys[i] was read
	if s.lit('}') {
		s.ws()
		return h, s.i == len(s.b)
	}
	for {
		kb, ok := s.str()
		if !ok || !s.lit(':') {
			return nil, false
		}
		k := -1
		for i, name := range jsonHeaderKeys {
			if kb == name {
				k = i
				break
			}
			if strings.EqualFold(kb, name) {
				return nil, false // encoding/json matches keys without case
			}
		}
		if k >= 0 {
			if seen&(1<<k) != 0 {
				return nil, false
			}
			seen |= 1 << k
		}
		switch k {
		case 0, 2, 3, 4:
			v, ok := s.integer(32)
			if !ok {
				return nil, false
			}
			switch k {
			case 0:
				h.Code = int32(v)
			case 2:
				h.Version = int32(v)
			case 3:
				h.Opaque = int32(v)
			case 4:
				h.Flag = int32(v)
			}
		case 1:
			switch s.peek() {
			case '"':
				name, ok := s.str()
				if !ok {
					return nil, false
				}
				l, ok := langNames[name]
				if !ok {
					l = langNames["OTHER"]
				}
				h.Language = l
			case 'n':
				if !s.word("null") {
					return nil, false
				}
			default:
				v, ok := s.integer(8)
				if !ok {
					return nil, false
				}
				h.Language = int8(v)
			}
		case 5:
			if s.peek() == 'n' {
				if !s.word("null") {
					return nil, false
				}
				break
			}
			v, ok := s.str()
			if !ok {
				return nil, false
			}
			h.Remark = v
		case 6:
			if s.peek() == 'n' {
				if !s.word("null") {
					return nil, false
				}
				break
			}
			if !s.lit('{') {
				return nil, false
			}
			if !s.lit('}') {
				for {
					ek, ok := s.str()
					if !ok || !s.lit(':') {
						return nil, false
					}
					if h.Ext == nil {
						// As encoding/json: a key, even of a null, makes the map.
						// Sized by the colons left: the pairs, plus the
						// few top-level keys that may follow.
						h.Ext = make(map[string]string, bytes.Count(s.b[s.i:], []byte{':'})+1)
					}
					var val string
					set := true
					switch s.peek() {
					case '"':
						v, ok := s.str()
						if !ok {
							return nil, false
						}
						val = v
					case 't':
						val = "true"
						set = s.word("true")
					case 'f':
						val = "false"
						set = s.word("false")
					case 'n':
						if !s.word("null") {
							return nil, false
						}
						delete(h.Ext, ek) // a later null clears the key
						set = false
					default:
						return nil, false // numbers: encoding/json's float reading
					}
					if set {
						h.Ext[ek] = val
					} else if val != "" {
						return nil, false // a bad true/false literal
					}
					if s.lit('}') {
						break
					}
					if !s.lit(',') {
						return nil, false
					}
				}
			}
		default:
			if _, ok := s.str(); !ok {
				return nil, false
			}
		}
		if s.lit('}') {
			break
		}
		if !s.lit(',') {
			return nil, false
		}
	}
	s.ws()
	return h, s.i == len(s.b)
}

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
