package remoting

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twinmq/twinmq/internal/remoting/wire"
)

// echoServer answers every request with an empty SUCCESS response from one
// goroutine per connection, flushing when no more requests are buffered:
// cheap enough that the client's own cost dominates the benchmark.
type echoServer struct {
	lis      net.Listener
	perFrame time.Duration // a pause after each request read (a slow reader)
	wg       sync.WaitGroup
	mu       sync.Mutex
	cs       []net.Conn
}

func newEchoServer(tb testing.TB) *echoServer { return newSlowEchoServer(tb, 0) }

func newSlowEchoServer(tb testing.TB, perFrame time.Duration) *echoServer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &echoServer{lis: lis, perFrame: perFrame}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.cs = append(s.cs, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go s.serve(c)
		}
	}()
	tb.Cleanup(func() {
		_ = lis.Close()
		s.mu.Lock()
		for _, c := range s.cs {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) serve(c net.Conn) {
	defer s.wg.Done()
	br := bufio.NewReaderSize(c, 64<<10)
	bw := bufio.NewWriterSize(c, 64<<10)
	var out []byte
	for {
		req, err := wire.ReadFrame(br, 0)
		if err != nil {
			return
		}
		if s.perFrame > 0 {
			time.Sleep(s.perFrame)
		}
		if req.IsOneway() {
			continue
		}
		h := wire.Header{Code: wire.RespSuccess, Opaque: req.Opaque, Flag: wire.FlagResponse, Ext: map[string]string{"queueOffset": "1"}}
		out, _ = wire.AppendFrame(out[:0], &h, nil, req.Serialize)
		_, _ = bw.Write(out)
		if br.Buffered() == 0 {
			if bw.Flush() != nil {
				return
			}
		}
	}
}

// BenchmarkInvoke: concurrent callers sharing one client (one connection)
// send a 1 KiB request with a header of a send's size and wait for the
// answer. It measures the client's per-request cost: encoding, the write
// path, opaque matching and the read path.
func BenchmarkInvoke(b *testing.B) {
	for _, callers := range []int{1, 64} {
		for _, cred := range []bool{false, true} {
			b.Run(fmt.Sprintf("callers=%d/signed=%v", callers, cred), func(b *testing.B) {
				s := newEchoServer(b)
				var opts []Option
				if cred {
					opts = append(opts, WithCredentials("ak", "sk"))
				}
				c := New(opts...)
				defer c.Close()
				body := make([]byte, 1024)
				ctx := context.Background()
				hdr := func() *wire.Header {
					return &wire.Header{Code: wire.CodeSendMessageV2, Ext: map[string]string{
						"a": "bench_group", "b": "remoting_bench", "c": "TBW102", "d": "4", "e": "3",
						"f": "0", "g": "1764115200000", "h": "0", "i": "UNIQ_KEY\x01C0A80001000000000000000000000001\x02", "j": "0", "k": "false", "m": "false", "n": "broker-0",
					}}
				}
				if _, err := c.Invoke(ctx, s.lis.Addr().String(), hdr(), body); err != nil {
					b.Fatal(err)
				}
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				b.ResetTimer()
				for range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(b.N) {
							if _, err := c.Invoke(ctx, s.lis.Addr().String(), hdr(), body); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}
