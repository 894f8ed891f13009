package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
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
