package consumer

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/pb/forwardpb"
	"github.com/twinmq/twinmq/lane"
)

// connectWait bounds how long a forward waits for a connection to an
// instance to become ready. A connection that cannot be made in this time
// was never used, so the message definitely did not reach that instance
// and another can be tried.
const connectWait = 2 * time.Second

// forwarder is the client side of forwarding: one connection per target
// address, kept while the address is in the group's snapshot. A
// connection is closed only once no forward uses it: closing it under a
// forward in flight would lose the answer of a handler that ran.
type forwarder struct {
	c     *Consumer
	mu    sync.Mutex
	conns map[string]*fconn
}

type fconn struct {
	cc     *grpc.ClientConn
	refs   int  // forwards using it; guarded by forwarder.mu
	gone   bool // dropped from the snapshot: close when refs reaches 0
	kicked atomic.Int64
}

// kickEvery bounds how often a failed forward cuts a connection's
// reconnect backoff short.
const kickEvery = 100 * time.Millisecond

// kick makes a connection in its reconnect backoff try again now, at most
// every kickEvery: an instance that restarted at the same address then
// takes the next forwards instead of those of the next second or so, and a
// dead one costs a failed connection attempt per kickEvery at most.
func (fc *fconn) kick() {
	now := time.Now().UnixNano()
	last := fc.kicked.Load()
	if now-last < int64(kickEvery) || !fc.kicked.CompareAndSwap(last, now) {
		return
	}
	fc.cc.ResetConnectBackoff()
}

func newForwarder(c *Consumer) *forwarder {
	return &forwarder{c: c, conns: map[string]*fconn{}}
}

// acquire returns the connection to addr, dialling it if needed; release
// it when the forward is done.
func (f *forwarder) acquire(addr string) (*fconn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fc := f.conns[addr]; fc != nil {
		fc.refs++
		return fc, nil
	}
	creds := insecure.NewCredentials()
	if f.c.opts.forwardClient != nil {
		creds = credentials.NewTLS(f.c.opts.forwardClient)
	}
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxForwardBytes), grpc.MaxCallRecvMsgSize(maxForwardBytes)),
		// A restarted instance must be usable within a second or two,
		// not after gRPC's default two-minute backoff.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: connectWait,
		}))
	if err != nil {
		return nil, err
	}
	fc := &fconn{cc: cc, refs: 1}
	f.conns[addr] = fc
	return fc, nil
}

func (f *forwarder) release(fc *fconn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc.refs--
	if fc.gone && fc.refs == 0 {
		_ = fc.cc.Close()
	}
}

// retain drops the connections to addresses no longer in the snapshot.
func (f *forwarder) retain(addrs map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a, fc := range f.conns {
		if addrs[a] {
			continue
		}
		delete(f.conns, a)
		fc.gone = true
		if fc.refs == 0 {
			_ = fc.cc.Close()
		}
	}
}

func (f *forwarder) close() {
	f.retain(nil)
}

// maxForwardBytes bounds a forwarded delivery, both ways: the largest body
// the driver decodes, with room for the message's properties. gRPC's
// default of 4 MiB would refuse large messages that the broker delivers.
const maxForwardBytes = driver.MaxDecodedBody + 4<<20

// ready waits until cc is connected. false means the connection could not
// be made: nothing was sent on it. A connection in its reconnect backoff
// (its last attempt failed) gives up at once rather than hold the message
// for the rest of ctx; see kick for how it comes back.
func ready(ctx context.Context, cc *grpc.ClientConn) bool {
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return true
		case connectivity.Idle:
			cc.Connect()
		case connectivity.TransientFailure, connectivity.Shutdown:
			return false
		}
		if !cc.WaitForStateChange(ctx, s) {
			return false
		}
	}
}

// deliver sends one message to one instance and classifies the answer as
// a forwarded_total result. Only answers that prove the handler did not
// run are fwdUnreachable or fwdRefused; a transport failure after the
// request may have left is fwdUnknown.
func (f *forwarder) deliver(d *delivery, in lane.Instance, target string) (string, error) {
	c := f.c
	fc, err := f.acquire(in.Addr)
	if err != nil {
		return fwdUnreachable, fmt.Errorf("instance %s at %s: %w", in.ID, in.Addr, err)
	}
	defer f.release(fc)
	cc := fc.cc
	ls := c.live.Load()
	ctx, cancel := context.WithTimeout(c.workCtx, ls.forwardTimeout)
	defer cancel()
	cctx, ccancel := context.WithTimeout(ctx, connectWait)
	ok := ready(cctx, cc)
	ccancel()
	if !ok {
		fc.kick()
		return fwdUnreachable, fmt.Errorf("instance %s at %s: not reachable (%s)", in.ID, in.Addr, cc.GetState())
	}
	ctx = metadata.AppendToOutgoingContext(ctx, ForwardTokenHeader, c.opts.forwardToken)
	resp, err := forwardpb.NewForwarderClient(cc).Deliver(ctx, &forwardpb.DeliverRequest{
		Group:          c.group,
		Lane:           target,
		OriginCluster:  d.msg.Cluster,
		OriginEndpoint: d.msg.Endpoint,
		Message:        toForwarded(d.msg),
	})
	if err != nil {
		switch status.Code(err) {
		case codes.Unauthenticated:
			return fwdRefused, fmt.Errorf("instance %s at %s: %w: %w", in.ID, in.Addr, ErrUnauthenticated, err)
		case codes.ResourceExhausted, codes.InvalidArgument, codes.Unimplemented:
			// gRPC refused the call before the service saw it (a message
			// over a peer's limit, a peer without the service): the
			// handler did not run.
			return fwdRefused, fmt.Errorf("instance %s at %s refused the delivery: %w", in.ID, in.Addr, err)
		}
		return fwdUnknown, fmt.Errorf("instance %s at %s: %w", in.ID, in.Addr, err)
	}
	switch resp.GetCode() {
	case forwardpb.DeliverCode_DELIVER_CODE_HANDLED:
		return fwdHandled, nil
	case forwardpb.DeliverCode_DELIVER_CODE_HANDLER_FAILED:
		return fwdFailed, fmt.Errorf("handler at instance %s (lane %q): %s", in.ID, target, resp.GetMessage())
	case forwardpb.DeliverCode_DELIVER_CODE_NOT_MY_LANE:
		return fwdRefused, fmt.Errorf("instance %s does not take lane %q: %s", in.ID, target, resp.GetMessage())
	case forwardpb.DeliverCode_DELIVER_CODE_UNAUTHENTICATED:
		return fwdRefused, fmt.Errorf("instance %s: %w", in.ID, ErrUnauthenticated)
	default:
		return fwdUnknown, fmt.Errorf("instance %s answered code %v: %s", in.ID, resp.GetCode(), resp.GetMessage())
	}
}

// forwardServer serves twinmq.forward.v1.Forwarder for one consumer: it
// runs the consumer's handler for messages other consumers of the group
// received for this consumer's lane.
type forwardServer struct {
	forwardpb.UnimplementedForwarderServer
	c        *Consumer
	srv      *grpc.Server
	addr     string
	draining atomic.Bool
	served   chan struct{}
	stopOnce sync.Once
}

func newForwardServer(c *Consumer) (*forwardServer, error) {
	lis, err := net.Listen("tcp", c.opts.forwardListen)
	if err != nil {
		return nil, fmt.Errorf("%w: forwarding listener %q: %w", ErrInvalidConfig, c.opts.forwardListen, err)
	}
	s := &forwardServer{c: c, addr: lis.Addr().String(), served: make(chan struct{})}
	if c.opts.forwardAddr != "" {
		s.addr = c.opts.forwardAddr
	}
	sopts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.authenticate), grpc.MaxRecvMsgSize(maxForwardBytes)}
	if c.opts.forwardServer != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(c.opts.forwardServer)))
	}
	s.srv = grpc.NewServer(sopts...)
	forwardpb.RegisterForwarderServer(s.srv, s)
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			c.log.Error("forwarding service stopped", zap.Error(err))
		}
	}()
	return s, nil
}

// authenticate refuses calls without the group's token. The comparison
// takes the same time whatever the token, so it leaks nothing of it.
func (s *forwardServer) authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(ForwardTokenHeader)
	want := []byte(s.c.opts.forwardToken)
	if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
		s.c.met.servedForward(fwdRefused)
		s.c.log.Warn("forwarded delivery refused: missing or wrong group token")
		return nil, status.Error(codes.Unauthenticated, "missing or wrong forwarding token for this group")
	}
	return next(ctx, req)
}

// Deliver runs the handler for a forwarded message.
func (s *forwardServer) Deliver(ctx context.Context, req *forwardpb.DeliverRequest) (*forwardpb.DeliverResponse, error) {
	c := s.c
	refuse := func(why string) (*forwardpb.DeliverResponse, error) {
		c.met.servedForward(fwdRefused)
		return &forwardpb.DeliverResponse{Code: forwardpb.DeliverCode_DELIVER_CODE_NOT_MY_LANE, Message: why}, nil
	}
	switch ls := c.live.Load(); {
	case req.GetMessage() == nil:
		return nil, status.Error(codes.InvalidArgument, "no message")
	case req.GetGroup() != c.group:
		return refuse(fmt.Sprintf("this consumer is in group %q, not %q", c.group, req.GetGroup()))
	case s.draining.Load():
		return refuse("this consumer is closing")
	case req.GetLane() != ls.lane:
		return refuse(fmt.Sprintf("this consumer serves lane %q, not %q", ls.lane, req.GetLane()))
	}
	m := fromForwarded(req)
	if m.Topic != c.topic {
		return refuse(fmt.Sprintf("this consumer consumes topic %q, not %q", c.topic, m.Topic))
	}
	if err := c.slots.acquire(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer c.slots.release(1)
	// The handler's context ends with the caller's deadline (the origin
	// gives up then and leaves the message for redelivery), or when Close
	// gives up waiting.
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.workCtx, cancel)
	defer stop()
	if err := c.runHandler(hctx, m); err != nil {
		c.met.servedForward(fwdFailed)
		return &forwardpb.DeliverResponse{Code: forwardpb.DeliverCode_DELIVER_CODE_HANDLER_FAILED, Message: err.Error()}, nil
	}
	c.met.servedForward(fwdHandled)
	return &forwardpb.DeliverResponse{Code: forwardpb.DeliverCode_DELIVER_CODE_HANDLED}, nil
}

// stop waits for the deliveries being served, or cuts them when ctx ends.
func (s *forwardServer) stop(ctx context.Context) {
	s.stopOnce.Do(func() {
		done := make(chan struct{})
		go func() {
			s.srv.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			s.srv.Stop()
			<-done
		}
		<-s.served
	})
}
