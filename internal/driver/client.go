package driver

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/twinmq/twinmq/internal/pb/pbcodec"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// maxMsgSize bounds every gRPC message the client sends or receives: the
// proxy's own inbound cap (grpcMaxInboundMessageSize, 130 MiB). gRPC's
// default receive limit of 4 MiB is below one message with a body of the
// protocol's 4 MiB limit plus its properties; 130 MiB fits a send of 32
// such messages (a full batch, 128 MiB plus properties) and a received
// message from a server configured with a larger body limit. A request
// over it fails on the client (ErrTooLarge) instead of being refused by
// the proxy after the transfer. Memory is only ever what the messages
// really take: the bound allocates nothing.
const maxMsgSize = 130 << 20

// Client is one RocketMQ 5 client instance: one x-mq-client-id, one role,
// talking to any number of endpoints. It dials an endpoint lazily on first
// use, opens its Telemetry stream and waits for the Settings echo before the
// first call there, and keeps it alive with heartbeats. It is safe for
// concurrent use.
type Client struct {
	cfg      Config
	id       string
	hdr      *headers
	ids      *MessageIDGenerator
	log      *zap.Logger
	met      *metrics
	hostname string
	platform string
	// sendCalls recycles the request and answer memory of Send.
	sendCalls sync.Pool

	root    context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closed  atomic.Bool
	closeMu sync.Mutex

	mu        sync.RWMutex
	endpoints map[string]*endpoint

	// pubsub holds the Topics / Subscriptions part of Settings; it can be
	// replaced at run time by SetTopics and SetSubscriptions.
	pubsubMu sync.Mutex
	topics   []string
	subs     []Subscription

	routes routeCache
	orphan chan struct{} // semaphore bounding concurrent orphan checks
	// verifying bounds concurrent message verifications.
	verifying chan struct{}
	codec     *pbcodec.Codec // shared by the client's connections
	pool      *pbcodec.Pool  // the codec's and the connections' buffers
}

// endpoint is one server address with its connection and telemetry.
type endpoint struct {
	addr string
	pbep *rmqpb.Endpoints // shared read-only in requests
	conn *grpc.ClientConn
	stub rmqpb.MessagingServiceClient
	tel  *telemetry
}

// New validates cfg and returns a Client. It dials nothing yet.
func New(cfg Config) (*Client, error) {
	if err := cfg.validateAndDefault(); err != nil {
		return nil, err
	}
	id := cfg.ClientID
	if id == "" {
		id = NewClientID()
	}
	host, err := os.Hostname()
	if err != nil || host == "" || !utf8.ValidString(host) {
		// The born host is a protobuf string: it must be UTF-8.
		host = "localhost"
	}
	met, err := newMetrics(cfg.Registerer, cfg.Cluster, id)
	if err != nil {
		return nil, err
	}
	root, stop := context.WithCancel(context.Background())
	pool := pbcodec.NewPool()
	c := &Client{
		cfg:       cfg,
		id:        id,
		hdr:       newHeaders(id, cfg.Namespace, cfg.Credentials),
		ids:       NewMessageIDGenerator(),
		pool:      pool,
		codec:     pbcodec.NewWithPool(pool),
		log:       cfg.Logger.With(zap.String("client_id", id), zap.Stringer("client_type", cfg.Type)),
		met:       met,
		hostname:  host,
		platform:  runtime.GOOS + "/" + runtime.GOARCH + " " + runtime.Version(),
		root:      root,
		stop:      stop,
		endpoints: make(map[string]*endpoint),
		topics:    cfg.Topics,
		subs:      cfg.Subscriptions,
		orphan:    make(chan struct{}, 8),
		verifying: make(chan struct{}, 8),
	}
	c.routes.init()
	c.wg.Add(2)
	go c.heartbeatLoop()
	go c.routeRefreshLoop()
	return c, nil
}

// ID returns the client's x-mq-client-id.
func (c *Client) ID() string { return c.id }

// Type returns the client's role.
func (c *Client) Type() ClientType { return c.cfg.Type }

// Group returns the consumer group ("" for producers).
func (c *Client) Group() string { return c.cfg.Group }

// RequestTimeout returns the effective per-call timeout.
func (c *Client) RequestTimeout() time.Duration { return c.cfg.RequestTimeout }

// NewMessageID returns a fresh message id in the official layout.
func (c *Client) NewMessageID() string { return c.ids.Next() }

// Endpoints returns the endpoints this client has used, sorted.
func (c *Client) Endpoints() []string {
	c.mu.RLock()
	out := make([]string, 0, len(c.endpoints))
	for a := range c.endpoints {
		out = append(out, a)
	}
	c.mu.RUnlock()
	sort.Strings(out)
	return out
}

// Connect dials endpoint (if not yet) and waits, bounded by ctx, until its
// Telemetry stream has exchanged Settings. Every call does this itself; use
// Connect to warm up endpoints or to check them at start.
func (c *Client) Connect(ctx context.Context, endpoint string) error {
	_, err := c.prepare(ctx, endpoint, "Telemetry")
	return err
}

// ServerSettings returns the settings the server at endpoint merged into
// this client's, once the Telemetry handshake with it is done.
func (c *Client) ServerSettings(endpoint string) (ServerSettings, bool) {
	c.mu.RLock()
	ep := c.endpoints[endpoint]
	c.mu.RUnlock()
	if ep == nil {
		return ServerSettings{}, false
	}
	s := ep.tel.settings.Load()
	if s == nil {
		return ServerSettings{}, false
	}
	return *s, true
}

// SetTopics replaces the topics a Producer announces and resends Settings
// on every open Telemetry stream.
func (c *Client) SetTopics(topics []string) error {
	if c.cfg.Type != Producer {
		return clientError(ErrBadRequest, "Telemetry", "", "SetTopics is for producers")
	}
	for i, t := range topics {
		if t == "" {
			return clientError(ErrBadRequest, "Telemetry", "", "topic %d is empty", i)
		}
	}
	c.pubsubMu.Lock()
	c.topics = append([]string(nil), topics...)
	c.pubsubMu.Unlock()
	c.resendSettings()
	return nil
}

// SetSubscriptions replaces a consumer's subscriptions and resends Settings
// on every open Telemetry stream.
func (c *Client) SetSubscriptions(subs []Subscription) error {
	if !c.cfg.Type.consumer() {
		return clientError(ErrBadRequest, "Telemetry", "", "SetSubscriptions is for consumers")
	}
	if len(subs) == 0 {
		return clientError(ErrBadRequest, "Telemetry", "", "a consumer needs at least one subscription")
	}
	for i, s := range subs {
		if s.Topic == "" {
			return clientError(ErrBadRequest, "Telemetry", "", "subscription %d has no topic", i)
		}
	}
	c.pubsubMu.Lock()
	c.subs = append([]Subscription(nil), subs...)
	c.pubsubMu.Unlock()
	c.resendSettings()
	return nil
}

func (c *Client) resendSettings() {
	c.mu.RLock()
	eps := make([]*endpoint, 0, len(c.endpoints))
	for _, ep := range c.endpoints {
		eps = append(eps, ep)
	}
	c.mu.RUnlock()
	for _, ep := range eps {
		ep.tel.resendSettings()
	}
}

// prepare returns the endpoint for addr, dialling it if needed, once its
// Settings handshake is done.
func (c *Client) prepare(ctx context.Context, addr, rpc string) (*endpoint, error) {
	if c.closed.Load() {
		return nil, &Error{RPC: rpc, Endpoint: addr, class: ErrClosed}
	}
	ep, err := c.endpoint(addr, rpc)
	if err != nil {
		return nil, err
	}
	if err := ep.tel.awaitReady(ctx, rpc); err != nil {
		return nil, err
	}
	return ep, nil
}

func (c *Client) endpoint(addr, rpc string) (*endpoint, error) {
	c.mu.RLock()
	ep := c.endpoints[addr]
	c.mu.RUnlock()
	if ep != nil {
		return ep, nil
	}
	pbep, err := parseEndpoint(addr)
	if err != nil {
		return nil, clientError(ErrBadRequest, rpc, addr, "%v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, &Error{RPC: rpc, Endpoint: addr, class: ErrClosed}
	}
	if ep = c.endpoints[addr]; ep != nil {
		return ep, nil
	}
	var tc credentials.TransportCredentials
	if c.cfg.TLS != nil {
		tc = credentials.NewTLS(c.cfg.TLS)
	} else {
		tc = insecure.NewCredentials()
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(tc),
		// Transport sizes for batched requests (see pbcodec.StreamWindow).
		grpc.WithInitialWindowSize(pbcodec.StreamWindow), grpc.WithInitialConnWindowSize(pbcodec.ConnWindow),
		grpc.WithWriteBufferSize(pbcodec.BufferSize), grpc.WithReadBufferSize(pbcodec.BufferSize),
		experimental.WithBufferPool(c.pool),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize), grpc.ForceCodecV2(c.codec)),
		// gRPC's own reconnect backoff grows to 2 minutes by default; a
		// restarted broker must be usable again within seconds.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay: c.cfg.ReconnectBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxReconnectBackoff,
			},
			MinConnectTimeout: c.cfg.RequestTimeout,
		}),
	}, c.cfg.DialOptions...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, clientError(ErrBadRequest, rpc, addr, "dial: %v", err)
	}
	ep = &endpoint{addr: addr, pbep: pbep, conn: conn, stub: rmqpb.NewMessagingServiceClient(conn)}
	ep.tel = newTelemetry(c, ep)
	c.endpoints[addr] = ep
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ep.tel.run(c.root)
	}()
	c.log.Debug("endpoint added", zap.String("endpoint", addr))
	return ep, nil
}

// parseEndpoint turns "host:port" into the protocol's Endpoints, with the
// address scheme set (the proxy rejects ADDRESS_SCHEME_UNSPECIFIED).
func parseEndpoint(addr string) (*rmqpb.Endpoints, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q is not host:port: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 || host == "" {
		return nil, fmt.Errorf("endpoint %q needs a host and a port in 1..65535", addr)
	}
	scheme := rmqpb.AddressScheme_DOMAIN_NAME
	if ip := net.ParseIP(host); ip != nil {
		if ip.To4() != nil {
			scheme = rmqpb.AddressScheme_IPv4
		} else {
			scheme = rmqpb.AddressScheme_IPv6
		}
	}
	return &rmqpb.Endpoints{Scheme: scheme, Addresses: []*rmqpb.Address{{Host: host, Port: int32(port)}}}, nil
}

// callCtx derives the context of one unary call: the request timeout (or
// the caller's earlier deadline) and the protocol headers.
func (c *Client) callCtx(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	return c.hdr.outgoing(cctx), cancel
}

func (c *Client) resource(name string) *rmqpb.Resource {
	return &rmqpb.Resource{ResourceNamespace: c.cfg.Namespace, Name: name}
}

func (c *Client) groupResource() *rmqpb.Resource {
	if c.cfg.Group == "" {
		return nil
	}
	return c.resource(c.cfg.Group)
}

func (c *Client) heartbeatLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.root.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, ep := range c.readyEndpoints() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.heartbeat(c.root, ep); err != nil && c.root.Err() == nil {
					c.log.Warn("heartbeat failed", zap.String("endpoint", ep.addr), zap.Error(err))
				}
			}()
		}
		wg.Wait()
	}
}

func (c *Client) readyEndpoints() []*endpoint {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*endpoint, 0, len(c.endpoints))
	for _, ep := range c.endpoints {
		if ep.tel.ready.Load() {
			out = append(out, ep)
		}
	}
	return out
}

// Close tells every server this client talked to that it is going away
// (NotifyClientTermination, bounded by ctx), then closes the Telemetry
// streams and connections and stops the background work. Calls made after
// Close fail with ErrClosed. Close is idempotent; later calls return nil.
func (c *Client) Close(ctx context.Context) error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed.Swap(true) {
		return nil
	}
	eps := c.readyEndpoints()
	var wg sync.WaitGroup
	errs := make([]error, len(eps))
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.notifyTermination(ctx, ep)
		}()
	}
	wg.Wait()
	for _, ep := range eps {
		ep.tel.closeSend()
	}
	c.stop()
	c.mu.Lock()
	all := make([]*endpoint, 0, len(c.endpoints))
	for _, ep := range c.endpoints {
		all = append(all, ep)
	}
	c.mu.Unlock()
	c.wg.Wait()
	for _, ep := range all {
		_ = ep.conn.Close()
	}
	c.met.remove()
	var first error
	for _, err := range errs {
		if err != nil {
			c.log.Debug("notify client termination failed", zap.Error(err))
			if first == nil {
				first = err
			}
		}
	}
	return first
}
