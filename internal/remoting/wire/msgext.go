package wire

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"strconv"
)

// Magic codes of stored messages (MessageDecoder): V1 has a 1-byte topic
// length, V2 a 2-byte one.
const (
	MagicV1 int32 = -626843481
	MagicV2 int32 = -626843477
)

// sysFlag bits that change the stored layout.
const (
	sysBornHostV6  int32 = 0x10
	sysStoreHostV6 int32 = 0x20
)

// MessageExt is a stored message as brokers send it to clients (in a
// CHECK_TRANSACTION_STATE body, and in pull responses).
type MessageExt struct {
	Topic          string
	QueueID        int32
	Flag           int32
	QueueOffset    int64
	CommitLogOff   int64
	SysFlag        int32
	BornTimestamp  int64
	BornHost       string // host:port
	StoreTimestamp int64
	StoreHost      string
	ReconsumeTimes int32
	PreparedTxOff  int64
	Body           []byte
	Properties     map[string]string
}

func appendHost(b []byte, hostport string) []byte {
	host, port, _ := net.SplitHostPort(hostport)
	ip := net.ParseIP(host).To4()
	if ip == nil {
		ip = net.IPv4zero.To4()
	}
	b = append(b, ip...)
	p, _ := strconv.Atoi(port)
	return binary.BigEndian.AppendUint32(b, uint32(p))
}

// AppendMessageExt appends m in the stored layout (V1 magic, IPv4 hosts;
// the IPv6 flags are cleared; body CRC 0).
func AppendMessageExt(dst []byte, m *MessageExt) ([]byte, error) {
	props, err := EncodeProperties(m.Properties)
	if err != nil {
		return dst, err
	}
	if len(m.Topic) > 255 || len(props) > 0x7FFF {
		return dst, malformed("topic or properties too long for the stored layout")
	}
	sys := m.SysFlag &^ (sysBornHostV6 | sysStoreHostV6)
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, 0) // total size, set below
	magic := MagicV1
	dst = binary.BigEndian.AppendUint32(dst, uint32(magic))
	dst = binary.BigEndian.AppendUint32(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.QueueID))
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.Flag))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.QueueOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.CommitLogOff))
	dst = binary.BigEndian.AppendUint32(dst, uint32(sys))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.BornTimestamp))
	dst = appendHost(dst, m.BornHost)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.StoreTimestamp))
	dst = appendHost(dst, m.StoreHost)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.ReconsumeTimes))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.PreparedTxOff))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Body)))
	dst = append(dst, m.Body...)
	dst = append(dst, byte(len(m.Topic)))
	dst = append(dst, m.Topic...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(props)))
	dst = append(dst, props...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst, nil
}

func readHost(r *reader, v6 bool) string {
	n := 4
	if v6 {
		n = 16
	}
	ip := r.take(n, "host")
	port := r.u32("port")
	if r.err != nil {
		return ""
	}
	return net.JoinHostPort(net.IP(ip).String(), strconv.Itoa(int(port)))
}

// DecodeMessageExts reads stored messages back to back (V1 or V2 magic,
// IPv4 or IPv6 hosts). Compressed bodies are returned as stored (SysFlag
// says so). Bodies are views of b.
func DecodeMessageExts(b []byte) ([]MessageExt, error) {
	var out []MessageExt
	for len(b) > 0 {
		r := &reader{b: b}
		total := int(int32(r.u32("total size")))
		if r.err != nil {
			return nil, r.err
		}
		if total < 8 || total > len(b) {
			return nil, malformed("stored message %d: total size %d, %d bytes left", len(out), total, len(b))
		}
		r = &reader{b: b[4:total]}
		var m MessageExt
		magic := int32(r.u32("magic"))
		if r.err == nil && magic != MagicV1 && magic != MagicV2 {
			return nil, malformed("stored message %d: magic %d", len(out), magic)
		}
		r.u32("body crc")
		m.QueueID = int32(r.u32("queue id"))
		m.Flag = int32(r.u32("flag"))
		m.QueueOffset = int64(r.u64("queue offset"))
		m.CommitLogOff = int64(r.u64("physical offset"))
		m.SysFlag = int32(r.u32("sys flag"))
		m.BornTimestamp = int64(r.u64("born timestamp"))
		m.BornHost = readHost(r, m.SysFlag&sysBornHostV6 != 0)
		m.StoreTimestamp = int64(r.u64("store timestamp"))
		m.StoreHost = readHost(r, m.SysFlag&sysStoreHostV6 != 0)
		m.ReconsumeTimes = int32(r.u32("reconsume times"))
		m.PreparedTxOff = int64(r.u64("prepared transaction offset"))
		m.Body = r.take(int(int32(r.u32("body length"))), "body")
		var tl int
		if magic == MagicV2 {
			tl = int(r.u16("topic length"))
		} else {
			tl = int(r.u8("topic length"))
		}
		m.Topic = string(r.take(tl, "topic"))
		props := r.take(int(r.u16("properties length")), "properties")
		if r.err != nil {
			return nil, r.err
		}
		m.Properties = DecodeProperties(string(props))
		out = append(out, m)
		b = b[total:]
	}
	return out, nil
}

// DecodeOffsetMessageID reads the id a RocketMQ broker gives a stored
// message (the msgId of a send response, MessageDecoder.createMessageId):
// the store host's address and port and the message's commit log offset,
// in upper or lower case hex: 16 bytes for an IPv4 host, 28 for IPv6.
func DecodeOffsetMessageID(id string) (host string, commitLogOffset int64, err error) {
	var ipLen int
	switch len(id) {
	case 32:
		ipLen = 4
	case 56:
		ipLen = 16
	default:
		return "", 0, malformed("offset message id of %d characters", len(id))
	}
	b := make([]byte, len(id)/2)
	if _, err := hex.Decode(b, []byte(id)); err != nil {
		return "", 0, malformed("offset message id: %v", err)
	}
	r := &reader{b: b}
	h := readHost(r, ipLen == 16)
	off := int64(r.u64("commit log offset"))
	if r.err != nil {
		return "", 0, r.err
	}
	return h, off, nil
}

// OffsetOfMessageID returns the commit log offset of an offset message id,
// accepting exactly the ids DecodeOffsetMessageID accepts (ok is false for
// the others) without building the host's string.
func OffsetOfMessageID(id string) (commitLogOffset int64, ok bool) {
	if len(id) != 32 && len(id) != 56 {
		return 0, false
	}
	var off uint64
	for i := 0; i < len(id); i++ {
		c := id[i]
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		if i >= len(id)-16 {
			off = off<<4 | uint64(v)
		}
	}
	return int64(off), true
}
