// Package pbcodec is the gRPC codec that the driver and the broker both use
// for the generated protocol messages: gRPC's protobuf codec with a buffer
// pool of finer sizes. It lives beside the generated code because it is part
// of how those messages cross the wire, not logic of either side; the layer
// rule "the broker and the driver share only the protocol packages under
// internal/pb" covers it.
package pbcodec

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec is gRPC's protobuf codec with a buffer pool of finer sizes.
//
// gRPC's default codec takes the buffer a large message is marshalled into
// (or a received one is gathered into) from its default pool, whose tiers
// jump from 32 KiB to 1 MiB, and that pool zeroes the whole buffer on every
// Get. A batch of 64 messages of 1 KiB is a request of about 70 KiB, so
// every batched send cleared a megabyte on each side before handling
// seventy kilobytes. Power-of-two tiers bound the waste to twice the
// request, and the codec's Pool does not clear at all (see Pool). The bytes
// on the wire are the same: the codec keeps the name "proto", and the
// content-subtype is not derived from it.
type Codec struct {
	pool mem.BufferPool
}

// New returns a codec with a pool of its own (one per client or server: the
// pool is state, and this package keeps none at package level). Use it with
// grpc.ForceCodecV2 on a client and grpc.ForceServerCodecV2 on a server.
func New() *Codec { return NewWithPool(NewPool()) }

// NewWithPool returns a codec that takes its buffers from pool, which the
// client or server may share with its transport.
func NewWithPool(pool *Pool) *Codec { return &Codec{pool: pool} }

func (*Codec) Name() string { return "proto" }

// WireMessage is a message that writes its own protobuf encoding: a
// hand-written hot path (the batched send) that skips building generated
// structs. Its bytes must be what proto.Marshal of the equivalent generated
// message could produce; the implementations are tested against it.
type WireMessage interface {
	// WireSize returns the exact length AppendWire will append.
	WireSize() int
	// AppendWire appends the encoding to b.
	AppendWire(b []byte) []byte
}

// BufferUnmarshaler is a message that decodes itself and may keep slices of
// the received bytes instead of copying them (a message body on its way to
// the store). It takes ownership of buf: it must call buf.Free exactly once
// when nothing refers to the bytes any more, also when it returns an error.
type BufferUnmarshaler interface {
	UnmarshalBuffer(buf mem.Buffer) error
}

func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(WireMessage); ok {
		return c.marshalWire(w), nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("pbcodec: cannot marshal %T: not a protobuf message", v)
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

func (c *Codec) marshalWire(w WireMessage) mem.BufferSlice {
	size := w.WireSize()
	if mem.IsBelowBufferPoolingThreshold(size) {
		return mem.BufferSlice{mem.SliceBuffer(w.AppendWire(make([]byte, 0, size)))}
	}
	buf := c.pool.Get(size)
	*buf = w.AppendWire((*buf)[:0])
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}
}

func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if u, ok := v.(BufferUnmarshaler); ok {
		return u.UnmarshalBuffer(data.MaterializeToBuffer(c.pool))
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("pbcodec: cannot unmarshal into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
