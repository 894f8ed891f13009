package pbcodec

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// The codec must produce exactly the bytes protobuf's own marshaller
// does, for requests below and above gRPC's pooling threshold, and read them
// back.
func TestCodecRoundTrip(t *testing.T) {
	c := New()
	require.Equal(t, "proto", c.Name())
	for _, n := range []int{1, 70} {
		req := &rmqpb.SendMessageRequest{}
		for i := range n {
			req.Messages = append(req.Messages, &rmqpb.Message{
				Topic:            &rmqpb.Resource{Name: "t"},
				SystemProperties: &rmqpb.SystemProperties{MessageId: "id", QueueId: int32(i)},
				Body:             bytes.Repeat([]byte{'x'}, 1024),
			})
		}
		want, err := proto.Marshal(req)
		require.NoError(t, err)
		data, err := c.Marshal(req)
		require.NoError(t, err)
		require.Equal(t, want, data.Materialize(), "messages: %d", n)

		got := &rmqpb.SendMessageRequest{}
		require.NoError(t, c.Unmarshal(data, got))
		data.Free()
		require.True(t, proto.Equal(req, got), "messages: %d", n)
	}
	_, err := c.Marshal(struct{}{})
	require.Error(t, err)
	require.Error(t, c.Unmarshal(nil, struct{}{}))
}

// rawMessage writes fixed bytes as its encoding and reads by keeping the
// received buffer, as the hand-coded hot paths do.
type rawMessage struct {
	data []byte
	buf  mem.Buffer
}

func (r *rawMessage) WireSize() int                      { return len(r.data) }
func (r *rawMessage) AppendWire(b []byte) []byte         { return append(b, r.data...) }
func (r *rawMessage) UnmarshalBuffer(b mem.Buffer) error { r.buf = b; return nil }

// A hand-coded message goes out as exactly its own bytes, below and above
// the pooling threshold, and a BufferUnmarshaler receives the bytes it may
// keep until it frees them.
func TestCodecWireMessages(t *testing.T) {
	c := New()
	for _, n := range []int{10, 100 << 10} {
		out := &rawMessage{data: bytes.Repeat([]byte{7}, n)}
		data, err := c.Marshal(out)
		require.NoError(t, err)
		require.Equal(t, out.data, data.Materialize())

		in := &rawMessage{}
		require.NoError(t, c.Unmarshal(data, in))
		data.Free()
		require.Equal(t, out.data, in.buf.ReadOnlyData(), "the bytes stay valid until the receiver frees them")
		in.buf.Free()
	}
}

// ConsumeTag accepts what proto.Unmarshal accepts as a tag and refuses the
// rest.
func TestConsumeTag(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		num  protowire.Number
		typ  protowire.Type
		size int
	}{
		{in: protowire.AppendTag(nil, 1, protowire.BytesType), num: 1, typ: protowire.BytesType, size: 1},
		{in: protowire.AppendTag(nil, 15, protowire.VarintType), num: 15, typ: protowire.VarintType, size: 1},
		{in: protowire.AppendTag(nil, 16, protowire.Fixed32Type), num: 16, typ: protowire.Fixed32Type, size: 2},
		{in: protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType), num: protowire.MaxValidNumber, typ: protowire.BytesType, size: 5},
		{in: []byte{0x02}, size: -1},                       // field number 0
		{in: protowire.AppendVarint(nil, 1<<32), size: -1}, // field number past 2^29-1
		{in: []byte{0x80}, size: -1},                       // truncated
		{in: nil, size: -1},
	} {
		num, typ, n := ConsumeTag(tc.in)
		if tc.size < 0 {
			require.Less(t, n, 0, "%x", tc.in)
			continue
		}
		require.Equal(t, []any{tc.num, tc.typ, tc.size}, []any{num, typ, n}, "%x", tc.in)
	}
}

// The pool hands out buffers of the asked length from the smallest tier
// that holds it, reuses what comes back at a tier's exact capacity, and
// lets anything else go.
func TestPoolTiers(t *testing.T) {
	p := NewPool()
	for _, c := range []struct{ n, capacity int }{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {70 << 10, 128 << 10}, {16 << 20, 16 << 20},
	} {
		b := p.Get(c.n)
		require.Len(t, *b, c.n)
		require.Equal(t, c.capacity, cap(*b), "length %d", c.n)
		p.Put(b)
	}
	big := p.Get(16<<20 + 1)
	require.Len(t, *big, 16<<20+1)
	p.Put(big) // not a tier: dropped, not kept

	odd := make([]byte, 300)
	p.Put(&odd)
	got := p.Get(300)
	require.Equal(t, 512, cap(*got), "a buffer of no tier's capacity is never handed out")

	// A reused buffer keeps its bytes; every user overwrites what it reads.
	b := p.Get(4096)
	copy(*b, "stale")
	p.Put(b)
	again := p.Get(10)
	require.Len(t, *again, 10)
}

// Buffers of the smaller tiers outlive garbage collections: a busy client
// collects every few tens of milliseconds, and a sync.Pool alone would make
// it allocate its request buffers anew each time.
func TestPoolKeepsBuffersAcrossGC(t *testing.T) {
	p := NewPool()
	b := p.Get(70 << 10)
	(*b)[0] = 42
	p.Put(b)
	runtime.GC()
	runtime.GC()
	again := p.Get(100 << 10)
	require.Same(t, b, again)

	big := p.Get(1 << 20) // above the kept tiers: left to the sync.Pool
	p.Put(big)
	require.Nil(t, p.kept[tierOf(1<<20)])
}
