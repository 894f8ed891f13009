package remoting

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// Every request the client sends, oneway included, carries the access key,
// the token and a signature of what it sent; the caller's own fields are
// kept.
func TestSignsEveryRequest(t *testing.T) {
	for _, st := range []wire.SerializeType{wire.JSON, wire.RocketMQ} {
		got := make(chan *wire.Command, 2)
		srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
			got <- req
			return &wire.Header{}
		})
		c := New(WithSerializeType(st), WithCredentials("ak", "sk"), WithSecurityToken("tok"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Invoke(ctx, srv.addr(), &wire.Header{Code: 10, Ext: map[string]string{"topic": "t", "z": "é"}}, []byte("body"))
		require.NoError(t, err)
		require.NoError(t, c.InvokeOneway(ctx, srv.addr(), &wire.Header{Code: wire.CodeEndTransaction}, nil))
		for range 2 {
			req := <-got
			require.Equal(t, "ak", req.Ext[wire.ExtAccessKey])
			require.Equal(t, "tok", req.Ext[wire.ExtSecurityToken])
			require.NotEmpty(t, req.Ext[wire.ExtSignature])
			require.Equal(t, wire.Signature(req.Ext, req.Body, "sk"), req.Ext[wire.ExtSignature], "code %d", req.Code)
			if req.Code == 10 {
				require.Equal(t, "t", req.Ext["topic"])
				require.Equal(t, "é", req.Ext["z"])
			} else {
				require.True(t, req.IsOneway())
			}
		}
		cancel()
		require.NoError(t, c.Close())
	}
}

// The answer to a server's request is not signed (RocketMQ's clients sign
// only what they send as requests).
func TestServerRequestAnswerUnsigned(t *testing.T) {
	answered := make(chan *wire.Command, 1)
	srv := newFakeServer(t, wire.JSON, func(c net.Conn, req *wire.Command) *wire.Header {
		if req.IsResponse() {
			answered <- req
			return nil
		}
		f, _ := wire.AppendFrame(nil, &wire.Header{Code: wire.CodeCheckTransactionState, Opaque: 5}, nil, wire.JSON)
		_, _ = c.Write(f)
		return &wire.Header{}
	})
	c := New(WithCredentials("ak", "sk"), WithHandler(func(context.Context, string, *wire.Command) (*wire.Header, []byte) {
		return &wire.Header{Ext: map[string]string{"x": "1"}}, nil
	}))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Invoke(ctx, srv.addr(), &wire.Header{Code: 1}, nil)
	require.NoError(t, err)
	a := <-answered
	require.Equal(t, int32(5), a.Opaque)
	require.Equal(t, map[string]string{"x": "1"}, a.Ext)
}

// Concurrent callers with bodies of many sizes (up to 256 KiB, so writes
// are partial and coalesced frames interleave with the reads) each get
// their own body back.
func TestCoalescedWritesKeepFramesWhole(t *testing.T) {
	srv := newFakeServer(t, wire.JSON, echoCode)
	c := New()
	defer c.Close()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 20 {
				body := bytes.Repeat([]byte{byte(g), byte(i)}, r.IntN(128<<10))
				n := strconv.Itoa(g*100 + i)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				resp, err := c.Invoke(ctx, srv.addr(), &wire.Header{Code: 1, Ext: map[string]string{"n": n}}, body)
				cancel()
				if !assertNoErr(t, err) {
					return
				}
				if resp.Ext["n"] != n || !bytes.Equal(resp.Body, body) {
					t.Errorf("request %s: wrong answer (%d bytes)", n, len(resp.Body))
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A peer that stops reading: the caller flushing the queue is held no
// longer than its deadline, and so is every caller whose frame waits
// behind it; all end with timeouts, none hangs.
func TestStalledPeerBoundedByDeadlines(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := lis.Accept()
		if err == nil {
			accepted <- nc // never read from
		}
	}()
	defer func() {
		_ = lis.Close()
		select {
		case nc := <-accepted:
			_ = nc.Close()
		default:
		}
	}()
	c := New()
	defer c.Close()
	body := make([]byte, 8<<20)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := c.Invoke(ctx, lis.Addr().String(), &wire.Header{Code: 1}, body)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	require.Less(t, time.Since(start), 10*time.Second)
	for err := range errs {
		require.Error(t, err)
		require.True(t, errorsIsAny(err, rmqerr.ErrTimeout, rmqerr.ErrUnavailable), "%v", err)
	}
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// Under sustained load from many callers on a peer that reads slowly (the
// queue never drains), no caller is kept writing other callers' frames
// until its own deadline passes (which would cut a healthy connection):
// every request of short deadline succeeds.
func TestSustainedLoadKeepsConnection(t *testing.T) {
	srv := newSlowEchoServer(t, time.Millisecond) // about 256 MB/s of 256 KiB frames
	c := New()
	defer c.Close()
	body := make([]byte, 256<<10)
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := c.Invoke(ctx, srv.lis.Addr().String(), &wire.Header{Code: 1}, body)
				cancel()
				if err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("request failed under load: %v", err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load())
}
