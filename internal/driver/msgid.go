package driver

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Message ids use the official clients' layout: 34 upper-case hex digits,
// "01" (layout version) followed by 16 bytes: the MAC address (6 bytes), the
// low 2 bytes of the process id, the low 4 bytes of the seconds since
// 2021-01-01T00:00:00Z and a 4-byte big-endian sequence number.
const (
	messageIDVersion = "01"
	messageIDLen     = 2 + 2*16
)

// messageIDEpochUnix is the origin of the id's seconds field,
// 2021-01-01T00:00:00Z, in Unix seconds.
const messageIDEpochUnix = 1609459200

// MessageIDGenerator makes message ids for one client. It is safe for
// concurrent use.
type MessageIDGenerator struct {
	prefix [16]byte // upper-case hex of MAC (6 bytes) + pid (2 bytes)
	seq    atomic.Uint32
}

// NewMessageIDGenerator returns a generator using this host's first
// hardware address (random bytes when there is none) and the process id.
// The official clients share one sequence per process; without package
// state, each generator starts its sequence at a random value instead, so
// that two Clients of one process do not produce the same ids.
func NewMessageIDGenerator() *MessageIDGenerator {
	var mac [6]byte
	if !firstMAC(mac[:]) {
		_, _ = rand.Read(mac[:])
	}
	g := newGenerator(mac[:], uint16(os.Getpid()))
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	g.seq.Store(binary.BigEndian.Uint32(seed[:]))
	return g
}

// newGenerator builds a generator for a given MAC and pid.
func newGenerator(mac []byte, pid uint16) *MessageIDGenerator {
	g := &MessageIDGenerator{}
	var raw [8]byte
	copy(raw[:6], mac)
	binary.BigEndian.PutUint16(raw[6:], pid)
	hexUpper(g.prefix[:], raw[:])
	return g
}

func firstMAC(dst []byte) bool {
	ifs, err := net.Interfaces()
	if err != nil {
		return false
	}
	for _, ifc := range ifs {
		if len(ifc.HardwareAddr) >= 6 && ifc.Flags&net.FlagLoopback == 0 {
			nonZero := false
			for _, b := range ifc.HardwareAddr[:6] {
				nonZero = nonZero || b != 0
			}
			if nonZero {
				copy(dst, ifc.HardwareAddr[:6])
				return true
			}
		}
	}
	return false
}

// Next returns a new id, stamped with the current time.
func (g *MessageIDGenerator) Next() string { return g.next(time.Now()) }

// NextAt returns a new id stamped with now, for a caller that has just read
// the clock.
func (g *MessageIDGenerator) NextAt(now time.Time) string { return g.next(now) }

func (g *MessageIDGenerator) next(now time.Time) string {
	var out [messageIDLen]byte
	g.format(&out, now, g.seq.Add(1)-1)
	return string(out[:])
}

// fillEmpty replaces the empty strings of ids with new ids stamped with
// now. A batched send needs an id per message: they share one allocation
// and one step of the sequence (a block of consecutive numbers), and the
// clock is read once by the caller.
func (g *MessageIDGenerator) fillEmpty(ids []string, now time.Time) {
	n := 0
	for _, id := range ids {
		if id == "" {
			n++
		}
	}
	if n == 0 {
		return
	}
	seq := g.seq.Add(uint32(n)) - uint32(n)
	var b strings.Builder
	b.Grow(n * messageIDLen)
	var out [messageIDLen]byte
	for range n {
		g.format(&out, now, seq)
		b.Write(out[:])
		seq++
	}
	all := b.String()
	for i, id := range ids {
		if id == "" {
			ids[i], all = all[:messageIDLen], all[messageIDLen:]
		}
	}
}

func (g *MessageIDGenerator) format(out *[messageIDLen]byte, now time.Time, seq uint32) {
	out[0], out[1] = messageIDVersion[0], messageIDVersion[1]
	copy(out[2:], g.prefix[:])
	var tail [8]byte
	binary.BigEndian.PutUint32(tail[:4], uint32(now.Unix()-messageIDEpochUnix))
	binary.BigEndian.PutUint32(tail[4:], seq)
	hexUpper(out[18:], tail[:])
}

// hexUpper writes the upper-case hex of src into dst (len 2*len(src)).
func hexUpper(dst, src []byte) {
	const digits = "0123456789ABCDEF"
	for i, b := range src {
		dst[2*i] = digits[b>>4]
		dst[2*i+1] = digits[b&0x0f]
	}
}

// MessageIDInfo is what a message id in the official layout encodes.
type MessageIDInfo struct {
	MAC net.HardwareAddr
	// PID holds the low 2 bytes of the producer's process id.
	PID uint16
	// Time is the id's creation second. The field keeps only 32 bits of
	// seconds since 2021-01-01, so it wraps every ~136 years.
	Time     time.Time
	Sequence uint32
}

// ParseMessageID decodes an id in the official layout. Ids of other shapes
// (the protocol allows any non-blank string) give an ErrBadRequest error.
func ParseMessageID(id string) (MessageIDInfo, error) {
	if len(id) != messageIDLen || id[:2] != messageIDVersion {
		return MessageIDInfo{}, fmt.Errorf("%w: message id %q is not %d hex digits starting with %s",
			ErrBadRequest, truncate(id, 64), messageIDLen, messageIDVersion)
	}
	var raw [16]byte
	if _, err := hex.Decode(raw[:], []byte(id[2:])); err != nil {
		return MessageIDInfo{}, fmt.Errorf("%w: message id %q: %w", ErrBadRequest, id, err)
	}
	return MessageIDInfo{
		MAC:      net.HardwareAddr(append([]byte(nil), raw[:6]...)),
		PID:      binary.BigEndian.Uint16(raw[6:8]),
		Time:     time.Unix(messageIDEpochUnix+int64(binary.BigEndian.Uint32(raw[8:12])), 0).UTC(),
		Sequence: binary.BigEndian.Uint32(raw[12:16]),
	}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
