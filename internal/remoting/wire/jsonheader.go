package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The JSON header serialization: the writer of what fastjson writes, and
// a reader of the usual shape that leaves anything else to encoding/json.

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
