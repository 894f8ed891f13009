package remoting

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// fakeServer answers each request with serve's answer (nil: no answer) on
// the connection it came from, in its own serialization.
type fakeServer struct {
	t     *testing.T
	lis   net.Listener
	serve func(c net.Conn, req *wire.Command) *wire.Header
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
	st    wire.SerializeType
}

func newFakeServer(t *testing.T, st wire.SerializeType, serve func(net.Conn, *wire.Command) *wire.Header) *fakeServer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &fakeServer{t: t, lis: lis, serve: serve, st: st}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				var wmu sync.Mutex
				for {
					req, err := wire.ReadFrame(c, 0)
					if err != nil {
						return
					}
					go func() {
						h := s.serve(c, req)
						if h == nil || req.IsOneway() {
							return
						}
						h.Opaque, h.Flag = req.Opaque, h.Flag|wire.FlagResponse
						f, _ := wire.AppendFrame(nil, h, req.Body, s.st)
						wmu.Lock()
						_, _ = c.Write(f)
						wmu.Unlock()
					}()
				}
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *fakeServer) addr() string { return s.lis.Addr().String() }

func (s *fakeServer) cutAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

func (s *fakeServer) close() {
	_ = s.lis.Close()
	s.cutAll()
	s.wg.Wait()
}

func echoCode(_ net.Conn, req *wire.Command) *wire.Header {
	if req.Ext["sleep"] != "" {
		d, _ := time.ParseDuration(req.Ext["sleep"])
		time.Sleep(d)
	}
	return &wire.Header{Code: wire.RespSuccess, Ext: map[string]string{"n": req.Ext["n"]}}
}

// Many concurrent requests on one connection each get their own answer,
// whichever serialization the server answers in.
func TestInvokeMatchesByOpaque(t *testing.T) {
	for _, st := range []wire.SerializeType{wire.JSON, wire.RocketMQ} {
		srv := newFakeServer(t, st, echoCode)
		c := New(WithSerializeType(wire.RocketMQ))
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				n := strconv.Itoa(i)
				resp, err := c.Invoke(ctx, srv.addr(), &wire.Header{Code: 1, Ext: map[string]string{"n": n}}, []byte(n))
				if !assertNoErr(t, err) {
					return
				}
				if resp.Ext["n"] != n || string(resp.Body) != n {
					t.Errorf("request %s got answer %q/%q", n, resp.Ext["n"], resp.Body)
				}
			}()
		}
		wg.Wait()
		require.NoError(t, c.Close())
		require.Len(t, c.conns, 1)
	}
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// The caller's deadline ends the wait with a timeout error; a later
// request on the same connection still works.
func TestInvokeDeadline(t *testing.T) {
	srv := newFakeServer(t, wire.JSON, echoCode)
	c := New()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Invoke(ctx, srv.addr(), &wire.Header{Code: 1, Ext: map[string]string{"sleep": "1s"}}, nil)
	require.ErrorIs(t, err, rmqerr.ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	_, err = c.Invoke(ctx2, srv.addr(), &wire.Header{Code: 1}, nil)
	require.NoError(t, err)
}

// A lost connection fails its pending request as unavailable, and the next
// request dials again.
func TestReconnectAfterLoss(t *testing.T) {
	var srv *fakeServer
	srv = newFakeServer(t, wire.JSON, func(c net.Conn, req *wire.Command) *wire.Header {
		if req.Ext["cut"] != "" {
			srv.cutAll()
			return nil
		}
		return &wire.Header{}
	})
	c := New(WithBackoff(time.Millisecond, 10*time.Millisecond))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Invoke(ctx, srv.addr(), &wire.Header{Code: 1, Ext: map[string]string{"cut": "1"}}, nil)
	require.ErrorIs(t, err, rmqerr.ErrUnavailable)
	_, err = c.Invoke(ctx, srv.addr(), &wire.Header{Code: 1}, nil)
	require.NoError(t, err)
}

// A dial that fails is unavailable; the backoff is waited within the
// caller's deadline.
func TestDialFailure(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	c := New(WithBackoff(time.Hour, time.Hour))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = c.Invoke(ctx, addr, &wire.Header{Code: 1}, nil)
	require.ErrorIs(t, err, rmqerr.ErrUnavailable)
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	_, err = c.Invoke(short, addr, &wire.Header{Code: 1}, nil)
	require.ErrorIs(t, err, rmqerr.ErrTimeout, "the second dial waits for the backoff, past the caller's deadline")
}

// A request the server sends on the client's connection goes to the
// handler, and its answer goes back with the request's opaque.
func TestServerRequestToHandler(t *testing.T) {
	answered := make(chan *wire.Command, 1)
	srv := newFakeServer(t, wire.JSON, func(c net.Conn, req *wire.Command) *wire.Header {
		if req.IsResponse() {
			answered <- req
			return nil
		}
		// Ask the client something before answering.
		f, _ := wire.AppendFrame(nil, &wire.Header{Code: wire.CodeCheckTransactionState, Opaque: 777, Ext: map[string]string{"tx": "t1"}}, nil, wire.JSON)
		_, _ = c.Write(f)
		return &wire.Header{}
	})
	c := New(WithHandler(func(_ context.Context, addr string, req *wire.Command) (*wire.Header, []byte) {
		return &wire.Header{Code: wire.RespSuccess, Ext: map[string]string{"tx": req.Ext["tx"]}}, nil
	}))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Invoke(ctx, srv.addr(), &wire.Header{Code: 1}, nil)
	require.NoError(t, err)
	select {
	case a := <-answered:
		require.Equal(t, int32(777), a.Opaque)
		require.Equal(t, "t1", a.Ext["tx"])
	case <-ctx.Done():
		t.Fatal("the handler's answer never reached the server")
	}
}

func TestOnewayAndClose(t *testing.T) {
	got := make(chan *wire.Command, 1)
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		got <- req
		return &wire.Header{}
	})
	c := New()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.InvokeOneway(ctx, srv.addr(), &wire.Header{Code: wire.CodeEndTransaction}, nil))
	req := <-got
	require.True(t, req.IsOneway())
	require.NoError(t, c.Close())
	_, err := c.Invoke(ctx, srv.addr(), &wire.Header{Code: 1}, nil)
	require.ErrorIs(t, err, ErrClosed)
}

func TestResponseErrorClasses(t *testing.T) {
	cases := map[int32]error{
		wire.RespSystemBusy:          rmqerr.ErrThrottled,
		wire.RespTopicNotExist:       rmqerr.ErrNotFound,
		wire.RespServiceNotAvailable: rmqerr.ErrUnavailable,
		wire.RespMessageIllegal:      rmqerr.ErrBadRequest,
		wire.RespNoPermission:        rmqerr.ErrForbidden,
		wire.RespFlushDiskTimeout:    rmqerr.ErrTimeout,
		wire.RespSystemError:         rmqerr.ErrInternal,
	}
	for code, class := range cases {
		err := CheckResponse("b:1", &wire.Command{Header: wire.Header{Code: code, Remark: "r"}})
		require.ErrorIs(t, err, class, "code %d", code)
		var re *ResponseError
		require.True(t, errors.As(err, &re))
		require.Equal(t, code == wire.RespFlushDiskTimeout, re.Stored())
	}
	var e *rmqerr.Error
	require.True(t, errors.As(CheckResponse("b", &wire.Command{Header: wire.Header{Code: wire.RespTopicNotExist}}), &e))
	require.Equal(t, rmqerr.CodeTopicNotFound, e.Code)
	require.NoError(t, CheckResponse("b", &wire.Command{}))
}
