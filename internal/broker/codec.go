package broker

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is gRPC's protobuf codec with a buffer pool of finer sizes.
//
// gRPC's default codec gathers a received request into one buffer taken
// from its default pool, whose tiers jump from 32 KiB to 1 MiB, and that
// pool zeroes the whole buffer on every Get. A batch of 64 messages of 1 KiB
// is a request of about 70 KiB, so every batched SendMessage cleared a
// megabyte before copying seventy kilobytes. Power-of-two tiers bound the
// waste to twice the request. What is on the wire is unchanged: a server
// codec only replaces how messages are turned into bytes and back.
type codec struct {
	pool mem.BufferPool
}

// newCodec returns a codec with its own pool (one per Broker: the pool is
// state, and this package keeps none at package level).
func newCodec() *codec {
	// 256 B to 16 MiB; a request above the largest tier falls back to a
	// plain allocation inside the pool.
	pool, err := mem.NewBinaryTieredBufferPool(8, 12, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24)
	if err != nil {
		// The exponents are constants the pool accepts; keep gRPC's pool
		// rather than fail a start if a later gRPC refuses them.
		pool = mem.DefaultBufferPool()
	}
	return &codec{pool: pool}
}

func (*codec) Name() string { return "proto" }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("broker: cannot marshal %T: not a protobuf message", v)
	}
	size := proto.Size(m)
	// UseCachedSize reuses the sizes proto.Size just computed; the message
	// is not modified meanwhile.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("broker: cannot unmarshal into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
