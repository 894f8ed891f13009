package broker

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// BenchmarkSend measures SendMessage through gRPC on loopback: 1 KB
// messages, batches of 1 and 32, 64 concurrent callers. It reports
// messages per second.
func BenchmarkSend(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			cfg := Config{Name: "bench", DataDir: b.TempDir(), Topics: []Topic{{Name: "bench", Queues: 8}}}
			br, err := New(cfg)
			require.NoError(b, err)
			ctx := context.Background()
			require.NoError(b, br.Start(ctx))
			defer func() { require.NoError(b, br.Close(ctx)) }()
			c := benchDial(b, br.Addr())
			body := make([]byte, 1024)
			var seq atomic.Int64
			b.SetParallelism(64 / max(1, runtimeProcs()))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				cctx := metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", "bench")
				for pb.Next() {
					req := &rmqpb.SendMessageRequest{}
					for i := 0; i < batch; i++ {
						m := msg("bench", fmt.Sprintf("m-%d", seq.Add(1)), "")
						m.Body = body
						m.SystemProperties.QueueId = -1
						req.Messages = append(req.Messages, m)
					}
					resp, err := c.SendMessage(cctx, req)
					if err != nil || resp.GetStatus().GetCode() != rmqpb.Code_OK {
						b.Errorf("send: %v %v", err, resp.GetStatus())
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// BenchmarkReceiveAck measures pop + ack of 32-message batches from a
// pre-filled topic.
func BenchmarkReceiveAck(b *testing.B) {
	cfg := Config{Name: "bench", DataDir: b.TempDir(), Topics: []Topic{{Name: "bench", Queues: 8}}}
	br, err := New(cfg)
	require.NoError(b, err)
	ctx := context.Background()
	require.NoError(b, br.Start(ctx))
	defer func() { require.NoError(b, br.Close(ctx)) }()
	c := benchDial(b, br.Addr())
	cctx := metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", "bench")
	body := make([]byte, 1024)
	total := b.N * 32
	for sent := 0; sent < total; {
		req := &rmqpb.SendMessageRequest{}
		for i := 0; i < 32; i++ {
			m := msg("bench", fmt.Sprintf("m-%d", sent+i), "")
			m.Body = body
			m.SystemProperties.QueueId = -1
			req.Messages = append(req.Messages, m)
		}
		_, err := c.SendMessage(cctx, req)
		require.NoError(b, err)
		sent += 32
	}
	b.ResetTimer()
	start := time.Now()
	got := 0
	for got < total {
		rctx, cancel := context.WithTimeout(cctx, 30*time.Second)
		stream, err := c.ReceiveMessage(rctx, &rmqpb.ReceiveMessageRequest{
			Group: res("g"), MessageQueue: &rmqpb.MessageQueue{Topic: res("bench")},
			FilterExpression: &rmqpb.FilterExpression{Expression: "*"}, BatchSize: 32,
			InvisibleDuration: durationOf(time.Minute), LongPollingTimeout: durationOf(5 * time.Second),
		})
		require.NoError(b, err)
		ack := &rmqpb.AckMessageRequest{Group: res("g"), Topic: res("bench")}
		for {
			r, err := stream.Recv()
			if err != nil {
				break
			}
			if m := r.GetMessage(); m != nil {
				ack.Entries = append(ack.Entries, &rmqpb.AckMessageEntry{ReceiptHandle: m.GetSystemProperties().GetReceiptHandle()})
			}
		}
		cancel()
		if len(ack.Entries) > 0 {
			resp, err := c.AckMessage(cctx, ack)
			require.NoError(b, err)
			require.Equal(b, rmqpb.Code_OK, resp.GetStatus().GetCode())
		}
		got += len(ack.Entries)
	}
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "msgs/s")
}
