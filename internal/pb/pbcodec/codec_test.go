package pbcodec

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
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
