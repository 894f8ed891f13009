package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// FuzzHandleRequests feeds arbitrary bytes, decoded as each of the requests
// that carry receipt handles and as a send, to a running broker's handlers:
// every call must answer a status, never panic.
func FuzzHandleRequests(f *testing.F) {
	cfg := testConfig(f, f.TempDir())
	b, err := New(cfg)
	require.NoError(f, err)
	require.NoError(f, b.Start(context.Background()))
	f.Cleanup(func() { _ = b.Close(context.Background()) })
	s := &service{b: b}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-mq-client-id", "fuzz", "x-mq-language", "GO"))

	handle := receipt{broker: "b0", topic: "normal", queueID: 1, offset: 0, nonce: 1}.encode()
	seeds := []proto.Message{
		&rmqpb.AckMessageRequest{Group: res("g1"), Topic: res("normal"), Entries: []*rmqpb.AckMessageEntry{{MessageId: "m", ReceiptHandle: handle}}},
		&rmqpb.ChangeInvisibleDurationRequest{Group: res("g1"), Topic: res("normal"), ReceiptHandle: handle, InvisibleDuration: durationpb.New(time.Second)},
		&rmqpb.ForwardMessageToDeadLetterQueueRequest{Group: res("g1"), Topic: res("normal"), ReceiptHandle: handle},
		&rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("normal", "id", "body")}},
		&rmqpb.QueryRouteRequest{Topic: res("normal")},
	}
	for _, m := range seeds {
		data, _ := proto.Marshal(m)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ack rmqpb.AckMessageRequest
		if proto.Unmarshal(data, &ack) == nil {
			resp, err := s.AckMessage(ctx, &ack)
			require.NoError(t, err)
			require.NotNil(t, resp.GetStatus())
			require.Len(t, resp.GetEntries(), entriesIfValid(resp, len(ack.GetEntries())))
		}
		var ch rmqpb.ChangeInvisibleDurationRequest
		if proto.Unmarshal(data, &ch) == nil {
			resp, err := s.ChangeInvisibleDuration(ctx, &ch)
			require.NoError(t, err)
			require.NotNil(t, resp.GetStatus())
		}
		var fw rmqpb.ForwardMessageToDeadLetterQueueRequest
		if proto.Unmarshal(data, &fw) == nil {
			resp, err := s.ForwardMessageToDeadLetterQueue(ctx, &fw)
			require.NoError(t, err)
			require.NotNil(t, resp.GetStatus())
		}
		var send rmqpb.SendMessageRequest
		if proto.Unmarshal(data, &send) == nil {
			resp, err := s.SendMessage(ctx, &send)
			require.NoError(t, err)
			require.NotNil(t, resp.GetStatus())
			if resp.GetStatus().GetCode() == rmqpb.Code_OK {
				require.Len(t, resp.GetEntries(), len(send.GetMessages()))
			}
		}
		// The same bytes through the broker's own decoder, as the
		// registered handler serves them.
		var wire sendRequest
		if wire.UnmarshalBuffer(mem.SliceBuffer(data)) == nil {
			n := len(wire.msgs)
			resp := decodedReply(t, s.sendDecoded(ctx, &wire))
			wire.release()
			require.NotNil(t, resp.GetStatus())
			if resp.GetStatus().GetCode() == rmqpb.Code_OK {
				require.Len(t, resp.GetEntries(), n)
			}
		}
		var qr rmqpb.QueryRouteRequest
		if proto.Unmarshal(data, &qr) == nil {
			resp, err := s.QueryRoute(ctx, &qr)
			require.NoError(t, err)
			require.NotNil(t, resp.GetStatus())
		}
	})
}

// entriesIfValid: an ack answers one entry per request entry once the
// group and topic passed validation, none otherwise.
func entriesIfValid(resp *rmqpb.AckMessageResponse, n int) int {
	if len(resp.GetEntries()) == 0 {
		return 0
	}
	return n
}
