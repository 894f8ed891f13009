package remoting

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"errors"
	"fmt"
	"hash"
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
	cred       *credentials
	tls        *tls.Config
}

// credentials sign every request (see WithCredentials).
type credentials struct {
	accessKey, secretKey, token string
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

// WithCredentials signs every request the client sends (oneway ones
// included; answers to a server's requests are not signed, as RocketMQ's
// clients do not sign them) with RocketMQ's access-key scheme: the
// AccessKey field and the Signature of wire.Signature. An empty access key
// sends no credentials.
func WithCredentials(accessKey, secretKey string) Option {
	return func(o *options) {
		if accessKey == "" {
			o.cred = nil
			return
		}
		token := ""
		if o.cred != nil {
			token = o.cred.token
		}
		o.cred = &credentials{accessKey: accessKey, secretKey: secretKey, token: token}
	}
}

// WithSecurityToken adds a SecurityToken field (a temporary credential's
// token, signed with the rest) to the requests of WithCredentials; it has
// no effect without them.
func WithSecurityToken(token string) Option {
	return func(o *options) {
		if o.cred != nil {
			c := *o.cred
			c.token = token
			o.cred = &c
			return
		}
		o.cred = &credentials{token: token}
	}
}

// WithTLS dials every connection with TLS and this configuration (its
// ServerName, when empty, is the host of the address dialled). RocketMQ
// brokers and name servers with tlsMode permissive or enforcing serve TLS
// on their usual port. nil dials plaintext.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

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
	macs   sync.Pool // of hash.Hash: HMAC-SHA1 keyed with the secret key
	heads  sync.Pool // of *[]byte: frame heads being encoded
	bodies sync.Pool // of *[]byte: batch bodies being encoded (a frame's body is copied when queued)

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
	if o.cred != nil && o.cred.accessKey == "" {
		o.cred = nil // a token alone signs nothing
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{o: o, ctx: ctx, cancel: cancel, conns: map[string]*conn{}}
	if o.cred != nil {
		secret := []byte(o.cred.secretKey)
		c.macs.New = func() any { return hmac.New(sha1.New, secret) }
	}
	c.heads.New = func() any { b := make([]byte, 0, 512); return &b }
	c.bodies.New = func() any { return new([]byte) }
	return c
}

// conn is the state of one address. cur is nil while disconnected.
type conn struct {
	c    *Client
	addr string

	mu       sync.Mutex
	cur      *link
	pending  map[int32]chan *wire.Command
	failures int
	nextDial time.Time
}

// link is one connection of a conn and its write queue. Writes are
// coalesced: a caller appends its frame to buf and, if no flush is under
// way, writes buf itself (its frame and any queued before it) in one
// write; frames appended during that write go out together in the next
// one, by a background flush. Alone, a frame is written at once by its own
// caller (no goroutine hand-off); under load, many frames leave in one
// syscall.
type link struct {
	nc net.Conn

	mu      sync.Mutex
	buf     []byte // frames not yet written
	spare   []byte // the buffer last written, reused
	writing bool   // a flusher is in its loop
	err     error  // the link failed: nothing more is written
}

// maxSpare is the largest write buffer a link keeps for reuse.
const maxSpare = 1 << 20

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
func (cn *conn) get(ctx context.Context) (*link, error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.cur != nil {
		return cn.cur, nil
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
		if cn.cur != nil {
			return cn.cur, nil
		}
	}
	nc, err := cn.dial(ctx)
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
	l := &link{nc: nc}
	cn.cur = l
	cn.failures = 0
	go cn.readLoop(l)
	return l, nil
}

// dial opens a TCP connection, with the TLS handshake when configured.
func (cn *conn) dial(ctx context.Context) (net.Conn, error) {
	if cfg := cn.c.o.tls; cfg != nil {
		d := tls.Dialer{Config: cfg}
		return d.DialContext(ctx, "tcp", cn.addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", cn.addr)
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

// drop closes l (if it is still the current connection) and fails the
// requests waiting on it.
func (cn *conn) drop(l *link, why error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = why
	}
	l.buf = nil
	l.mu.Unlock()
	cn.mu.Lock()
	if cn.cur != l {
		cn.mu.Unlock()
		return
	}
	cn.cur = nil
	cn.failed()
	pend := cn.pending
	cn.pending = map[int32]chan *wire.Command{}
	cn.mu.Unlock()
	_ = l.nc.Close()
	for _, ch := range pend {
		close(ch)
	}
	cn.c.o.log.Debug("remoting connection lost", zap.String("addr", cn.addr), zap.Error(why))
}

func (cn *conn) readLoop(l *link) {
	defer cn.c.wg.Done()
	r := bufio.NewReaderSize(l.nc, 32<<10)
	for {
		cmd, err := wire.ReadFrame(r, cn.c.o.maxFrame)
		if err != nil {
			cn.drop(l, err)
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
		go cn.serve(l, cmd)
	}
}

// serve answers a server's request with the handler.
func (cn *conn) serve(l *link, req *wire.Command) {
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
	if err := cn.c.send(cn.c.ctx, cn, l, h, body); err != nil {
		cn.c.o.log.Warn("remoting: cannot answer a server's request", zap.String("addr", cn.addr), zap.Error(err))
	}
}

// writeStall bounds a background flush's write: a connection whose peer
// takes no more bytes for this long is dropped.
const writeStall = 30 * time.Second

// write queues head and body (copied) on l. Unless a flush is under way,
// the caller flushes the queue once, its own frame included, under its
// ctx deadline; frames queued meanwhile are left to a background flush
// (flushLoop), so a caller never writes for others past its own batch. A
// failed write drops the connection, which fails every request waiting on
// it. A nil return means the frame was written, or queued on a working
// connection behind a flush under way.
func (cn *conn) write(ctx context.Context, l *link, head, body []byte) error {
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.buf = append(append(l.buf, head...), body...)
	if l.writing {
		l.mu.Unlock()
		return nil
	}
	l.writing = true
	out := l.take()
	l.mu.Unlock()
	dl, _ := ctx.Deadline()
	if err := cn.flush(l, out, dl); err != nil {
		return err
	}
	l.mu.Lock()
	if len(l.buf) == 0 || l.err != nil {
		l.writing = false
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	cn.c.spawn(func() { cn.flushLoop(l) }) // when closed, Close drops l anyway
	return nil
}

// take returns the queue to write and starts a new one on the spare
// buffer; l.mu is held.
func (l *link) take() []byte {
	out := l.buf
	l.buf, l.spare = l.spare[:0], nil
	return out
}

// flush writes out with the deadline dl (zero: none) and keeps out as the
// spare buffer; a failed write drops the connection.
func (cn *conn) flush(l *link, out []byte, dl time.Time) error {
	_ = l.nc.SetWriteDeadline(dl)
	_, err := l.nc.Write(out)
	l.mu.Lock()
	if cap(out) <= maxSpare {
		l.spare = out[:0]
	}
	l.mu.Unlock()
	if err != nil {
		cn.drop(l, err)
	}
	return err
}

// flushLoop writes the queue until it is empty, each write bounded by
// writeStall; it runs in c.wg and ends when the queue is empty or the
// connection failed (Close drops every connection).
func (cn *conn) flushLoop(l *link) {
	defer cn.c.wg.Done()
	for {
		l.mu.Lock()
		if len(l.buf) == 0 || l.err != nil {
			l.writing = false
			l.mu.Unlock()
			return
		}
		out := l.take()
		l.mu.Unlock()
		if cn.flush(l, out, time.Now().Add(writeStall)) != nil {
			return
		}
	}
}

// spawn runs f in c.wg unless the client is closed.
func (c *Client) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go f()
	return true
}

// send encodes h (with the body's length) and writes the frame on l.
func (c *Client) send(ctx context.Context, cn *conn, l *link, h *wire.Header, body []byte) error {
	hp := c.heads.Get().(*[]byte)
	head, err := wire.AppendFrameHead((*hp)[:0], h, len(body), c.o.serialize)
	if err != nil {
		c.heads.Put(hp)
		return fmt.Errorf("remoting %s: %w: %w", cn.addr, rmqerr.ErrBadRequest, err)
	}
	err = cn.write(ctx, l, head, body)
	if cap(head) <= 64<<10 {
		*hp = head[:0]
		c.heads.Put(hp)
	}
	return err
}

// prepare sets what the client owns in a request's header and signs it.
func (c *Client) prepare(h *wire.Header, body []byte, oneway bool) {
	h.Opaque = c.opaque.Add(1)
	h.Language = wire.LangGo
	if h.Version == 0 {
		h.Version = c.o.version
	}
	h.Flag = 0
	if oneway {
		h.Flag = wire.FlagOneway
	}
	if cr := c.o.cred; cr != nil {
		if h.Ext == nil {
			h.Ext = make(map[string]string, 3)
		}
		h.Ext[wire.ExtAccessKey] = cr.accessKey
		if cr.token != "" {
			h.Ext[wire.ExtSecurityToken] = cr.token
		}
		mac := c.macs.Get().(hash.Hash)
		h.Ext[wire.ExtSignature] = wire.SignWith(mac, h.Ext, body)
		c.macs.Put(mac)
	}
}

// Invoke sends a request to addr and waits for its response until ctx ends.
// h's opaque, flag and language are set by the client, and with
// credentials its AccessKey, SecurityToken and Signature ext fields (h.Ext
// is created when nil). A response of any code is returned as is; see
// CheckResponse.
func (c *Client) Invoke(ctx context.Context, addr string, h *wire.Header, body []byte) (*wire.Command, error) {
	if err := ctx.Err(); err != nil {
		return nil, timeoutErr(addr, err)
	}
	cn, err := c.connFor(addr)
	if err != nil {
		return nil, err
	}
	l, err := cn.get(ctx)
	if err != nil {
		return nil, err
	}
	c.prepare(h, body, false)
	ch := make(chan *wire.Command, 1)
	cn.mu.Lock()
	if cn.cur != l {
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
	if err := c.send(ctx, cn, l, h, body); err != nil {
		forget()
		if errors.Is(err, rmqerr.ErrBadRequest) {
			return nil, err
		}
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

// InvokeOneway sends a request that gets no response. A nil error means the
// frame was queued on a working connection.
func (c *Client) InvokeOneway(ctx context.Context, addr string, h *wire.Header, body []byte) error {
	if err := ctx.Err(); err != nil {
		return timeoutErr(addr, err)
	}
	cn, err := c.connFor(addr)
	if err != nil {
		return err
	}
	l, err := cn.get(ctx)
	if err != nil {
		return err
	}
	c.prepare(h, body, true)
	if err := c.send(ctx, cn, l, h, body); err != nil {
		if errors.Is(err, rmqerr.ErrBadRequest) {
			return err
		}
		if ctx.Err() != nil {
			return timeoutErr(addr, ctx.Err())
		}
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
		l := cn.cur
		cn.mu.Unlock()
		if l != nil {
			cn.drop(l, ErrClosed)
		}
	}
	c.wg.Wait()
	return nil
}
