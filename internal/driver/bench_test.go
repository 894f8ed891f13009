package driver

import (
	"context"
	"testing"
)

// BenchmarkSendFake measures the client half of the send path (request
// building, headers, gRPC, normalization) against the scripted in-process
// server, 1 KB messages.
func BenchmarkSendFake(b *testing.B) {
	for _, n := range []int{1, 32} {
		b.Run(map[int]string{1: "batch1", 32: "batch32"}[n], func(b *testing.B) {
			f := startFake(b, func(f *fakeServer) { f.discardSends = true })
			c, err := New(Config{Type: Producer, Topics: []string{"orders"}})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Close(context.Background()) }()
			ctx := context.Background()
			if err := c.Connect(ctx, f.addr); err != nil {
				b.Fatal(err)
			}
			body := make([]byte, 1024)
			msgs := make([]*Message, n)
			for i := range msgs {
				msgs[i] = &Message{Topic: "orders", Body: body, QueueID: 0}
			}
			b.ReportAllocs()
			b.SetBytes(int64(n * len(body)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Send(ctx, f.addr, msgs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
