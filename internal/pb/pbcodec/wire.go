package pbcodec

import "google.golang.org/protobuf/encoding/protowire"

// ConsumeTag reads a field tag for a hand-written decoder (a
// BufferUnmarshaler), as the protobuf runtime does: n < 0 when the varint
// is truncated or overlong, or when the field number lies outside
// [1, 2^29-1], both of which proto.Unmarshal refuses. One-byte tags (field
// numbers 1 to 15), nearly every tag of the protocol, skip the general
// varint path.
func ConsumeTag(b []byte) (num protowire.Number, typ protowire.Type, n int) {
	if len(b) > 0 && b[0] < 0x80 && b[0] >= 8 {
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, n
	}
	num = protowire.Number(v >> 3)
	if v>>3 < uint64(protowire.MinValidNumber) || v>>3 > uint64(protowire.MaxValidNumber) {
		return 0, 0, -1
	}
	return num, protowire.Type(v & 7), n
}
