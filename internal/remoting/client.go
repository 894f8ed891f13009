package remoting

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// ErrClosed: the client was closed.
var ErrClosed = errors.New("remoting: client closed")

// Handler answers a request a server sends on a client's connection (for
// example CHECK_TRANSACTION_STATE). It returns the response header (its
// code and ext fields; opaque and flag are set by the client) and body; for
// a oneway request the answer is dropped.
type Handler func(ctx context.Context, addr string, req *wire.Command) (*wire.Header, []byte)

type options struct {
	log        *zap.Logger
	serialize  wire.SerializeType
	minBackoff time.Duration
	maxBackoff time.Duration
	maxFrame   int
	handler    Handler
	version    int32
}

// Option configures a Client.
type Option func(*options)

// WithLogger sets the logger (default: none).
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// WithSerializeType sets the serialization of the headers the client sends
// (default JSON, as RocketMQ's Java client). Responses of either are read.
func WithSerializeType(t wire.SerializeType) Option { return func(o *options) { o.serialize = t } }

// WithBackoff sets the reconnect backoff after a failed dial or a lost
// connection: it starts at min and doubles up to max (default 50ms..2s).
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithHandler sets the handler of requests servers send to the client.
// Without one, such requests are answered REQUEST_CODE_NOT_SUPPORTED.
func WithHandler(h Handler) Option { return func(o *options) { o.handler = h } }

// WithMaxFrame sets the largest frame read (default 16 MiB).
func WithMaxFrame(n int) Option { return func(o *options) { o.maxFrame = n } }

// Client holds one multiplexed connection per server address. Requests are
// matched to responses by opaque; a broken connection fails its pending
// requests with an error wrapping rmqerr.ErrUnavailable and is dialled
// again on the next request, after a backoff that grows with consecutive
// failures. Close ends every connection and waits for the client's
// goroutines.
type Client struct {
	o      options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	opaque atomic.Int32

	mu     sync.Mutex
	conns  map[string]*conn
	closed bool
}

// New returns a client; it dials lazily.
func New(opts ...Option) *Client {
	o := options{log: zap.NewNop(), minBackoff: 50 * time.Millisecond, maxBackoff: 2 * time.Second,
		maxFrame: wire.DefaultMaxFrame, version: 475}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{o: o, ctx: ctx, cancel: cancel, conns: map[string]*conn{}}
}

// conn is the state of one address. nc is nil while disconnected.
type conn struct {
	c    *Client
	addr string

	mu       sync.Mutex
	nc       net.Conn
	pending  map[int32]chan *wire.Command
	failures int
	nextDial time.Time

	wmu sync.Mutex // serializes writes to nc
}

func (c *Client) connFor(addr string) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	cn := c.conns[addr]
	if cn == nil {
		cn = &conn{c: c, addr: addr, pending: map[int32]chan *wire.Command{}}
		c.conns[addr] = cn
	}
	return cn, nil
}

func unavailable(addr string, err error) error {
	return fmt.Errorf("remoting %s: %w: %w", addr, rmqerr.ErrUnavailable, err)
}

// timeoutErr names a request cut by the caller's context.
func timeoutErr(addr string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("remoting %s: %w: %w", addr, rmqerr.ErrTimeout, err)
	}
	return fmt.Errorf("remoting %s: %w", addr, err)
}

// get returns the connection, dialling it (after the backoff) if needed.
func (cn *conn) get(ctx context.Context) (net.Conn, error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.nc != nil {
		return cn.nc, nil
	}
	if wait := time.Until(cn.nextDial); wait > 0 {
		t := time.NewTimer(wait)
		cn.mu.Unlock()
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			cn.mu.Lock()
			return nil, timeoutErr(cn.addr, ctx.Err())
		case <-cn.c.ctx.Done():
			t.Stop()
			cn.mu.Lock()
			return nil, ErrClosed
		}
		cn.mu.Lock()
		if cn.nc != nil {
			return cn.nc, nil
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", cn.addr)
	if err != nil {
		cn.failed()
		if ctx.Err() != nil {
			return nil, timeoutErr(cn.addr, ctx.Err())
		}
		return nil, unavailable(cn.addr, err)
	}
	cn.c.mu.Lock()
	closed := cn.c.closed
	if !closed {
		cn.c.wg.Add(1)
	}
	cn.c.mu.Unlock()
	if closed {
		_ = nc.Close()
		return nil, ErrClosed
	}
	cn.nc = nc
	cn.failures = 0
	go cn.readLoop(nc)
	return nc, nil
}

// failed records a failure and schedules the next dial; cn.mu is held.
func (cn *conn) failed() {
	b := cn.c.o.minBackoff << min(cn.failures, 16)
	if b > cn.c.o.maxBackoff || b <= 0 {
		b = cn.c.o.maxBackoff
	}
	cn.failures++
	cn.nextDial = time.Now().Add(b)
}

// drop closes nc (if it is still the current connection) and fails the
// requests waiting on it.
func (cn *conn) drop(nc net.Conn, why error) {
	cn.mu.Lock()
	if cn.nc != nc {
		cn.mu.Unlock()
		return
	}
	cn.nc = nil
	cn.failed()
	pend := cn.pending
	cn.pending = map[int32]chan *wire.Command{}
	cn.mu.Unlock()
	_ = nc.Close()
	for _, ch := range pend {
		close(ch)
	}
	cn.c.o.log.Debug("remoting connection lost", zap.String("addr", cn.addr), zap.Error(why))
}

func (cn *conn) readLoop(nc net.Conn) {
	defer cn.c.wg.Done()
	for {
		cmd, err := wire.ReadFrame(nc, cn.c.o.maxFrame)
		if err != nil {
			cn.drop(nc, err)
			return
		}
		if cmd.IsResponse() {
			cn.mu.Lock()
			ch := cn.pending[cmd.Opaque]
			delete(cn.pending, cmd.Opaque)
			cn.mu.Unlock()
			if ch != nil {
				ch <- cmd
			}
			continue
		}
		cn.c.wg.Add(1)
		go cn.serve(nc, cmd)
	}
}

// serve answers a server's request with the handler.
func (cn *conn) serve(nc net.Conn, req *wire.Command) {
	defer cn.c.wg.Done()
	var h *wire.Header
	var body []byte
	if cn.c.o.handler != nil {
		h, body = cn.c.o.handler(cn.c.ctx, cn.addr, req)
	}
	if req.IsOneway() {
		return
	}
	if h == nil {
		h = &wire.Header{Code: wire.RespRequestCodeNotSupported, Remark: fmt.Sprintf("request code %d not supported", req.Code)}
	}
	h.Opaque, h.Flag, h.Language = req.Opaque, wire.FlagResponse, wire.LangGo
	frame, err := wire.AppendFrame(nil, h, body, cn.c.o.serialize)
	if err != nil {
		cn.c.o.log.Warn("remoting: cannot encode an answer", zap.Error(err))
		return
	}
	cn.wmu.Lock()
	_, err = nc.Write(frame)
	cn.wmu.Unlock()
	if err != nil {
		cn.drop(nc, err)
	}
}

func (cn *conn) write(ctx context.Context, nc net.Conn, frame []byte) error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetWriteDeadline(dl)
	} else {
		_ = nc.SetWriteDeadline(time.Time{})
	}
	_, err := nc.Write(frame)
	return err
}

func (c *Client) prepare(h *wire.Header, oneway bool) {
	h.Opaque = c.opaque.Add(1)
	h.Language = wire.LangGo
	if h.Version == 0 {
		h.Version = c.o.version
	}
	h.Flag = 0
	if oneway {
		h.Flag = wire.FlagOneway
	}
}

// Invoke sends a request to addr and waits for its response until ctx ends.
// h's opaque, flag and language are set by the client. A response of any
// code is returned as is; see CheckResponse.
func (c *Client) Invoke(ctx context.Context, addr string, h *wire.Header, body []byte) (*wire.Command, error) {
	cn, err := c.connFor(addr)
	if err != nil {
		return nil, err
	}
	nc, err := cn.get(ctx)
	if err != nil {
		return nil, err
	}
	c.prepare(h, false)
	frame, err := wire.AppendFrame(nil, h, body, c.o.serialize)
	if err != nil {
		return nil, fmt.Errorf("remoting %s: %w: %w", addr, rmqerr.ErrBadRequest, err)
	}
	ch := make(chan *wire.Command, 1)
	cn.mu.Lock()
	if cn.nc != nc {
		cn.mu.Unlock()
		return nil, unavailable(addr, errors.New("connection lost"))
	}
	cn.pending[h.Opaque] = ch
	cn.mu.Unlock()
	forget := func() {
		cn.mu.Lock()
		delete(cn.pending, h.Opaque)
		cn.mu.Unlock()
	}
	if err := cn.write(ctx, nc, frame); err != nil {
		forget()
		cn.drop(nc, err)
		if ctx.Err() != nil {
			return nil, timeoutErr(addr, ctx.Err())
		}
		return nil, unavailable(addr, err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, unavailable(addr, errors.New("connection lost before the response"))
		}
		return resp, nil
	case <-ctx.Done():
		forget()
		return nil, timeoutErr(addr, ctx.Err())
	case <-c.ctx.Done():
		return nil, ErrClosed
	}
}

// InvokeOneway sends a request that gets no response.
func (c *Client) InvokeOneway(ctx context.Context, addr string, h *wire.Header, body []byte) error {
	cn, err := c.connFor(addr)
	if err != nil {
		return err
	}
	nc, err := cn.get(ctx)
	if err != nil {
		return err
	}
	c.prepare(h, true)
	frame, err := wire.AppendFrame(nil, h, body, c.o.serialize)
	if err != nil {
		return fmt.Errorf("remoting %s: %w: %w", addr, rmqerr.ErrBadRequest, err)
	}
	if err := cn.write(ctx, nc, frame); err != nil {
		cn.drop(nc, err)
		return unavailable(addr, err)
	}
	return nil
}

// Close cuts every connection and waits for the client's goroutines.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.wg.Wait()
		return nil
	}
	c.closed = true
	conns := c.conns
	c.mu.Unlock()
	c.cancel()
	for _, cn := range conns {
		cn.mu.Lock()
		nc := cn.nc
		cn.mu.Unlock()
		if nc != nil {
			cn.drop(nc, ErrClosed)
		}
	}
	c.wg.Wait()
	return nil
}
