package driver

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Permission of a queue.
type Permission int

// Queue permissions.
const (
	PermNone Permission = iota
	PermRead
	PermWrite
	PermReadWrite
)

// Queue is one message queue of a topic on one broker.
type Queue struct {
	Topic      string
	ID         int32
	Permission Permission
	Broker     string
	// BrokerID is 0 for the master.
	BrokerID int32
	// Endpoint is the "host:port" serving this queue.
	Endpoint    string
	AcceptTypes []MessageType
}

// Readable reports whether the queue is a master queue one can receive from.
func (q Queue) Readable() bool {
	return q.BrokerID == 0 && (q.Permission == PermRead || q.Permission == PermReadWrite)
}

// Writable reports whether the queue is a master queue one can send to.
func (q Queue) Writable() bool {
	return q.BrokerID == 0 && (q.Permission == PermWrite || q.Permission == PermReadWrite)
}

// Accepts reports whether the queue accepts messages of type t (true when
// the server lists no types).
func (q Queue) Accepts(t MessageType) bool {
	if len(q.AcceptTypes) == 0 {
		return true
	}
	for _, a := range q.AcceptTypes {
		if a == t {
			return true
		}
	}
	return false
}

func (q Queue) pb(c *Client) *rmqpb.MessageQueue {
	mq := &rmqpb.MessageQueue{
		Topic:      c.resource(q.Topic),
		Id:         q.ID,
		Permission: rmqpb.Permission(q.Permission + 1),
		Broker:     &rmqpb.Broker{Name: q.Broker, Id: q.BrokerID},
	}
	if ep, err := parseEndpoint(q.Endpoint); err == nil {
		mq.Broker.Endpoints = ep
	}
	for _, t := range q.AcceptTypes {
		mq.AcceptMessageTypes = append(mq.AcceptMessageTypes, rmqpb.MessageType(t))
	}
	return mq
}

// queueFromPB maps a protocol queue. A queue whose broker carries no
// address is served by fallback, the endpoint that answered.
func queueFromPB(mq *rmqpb.MessageQueue, fallback string) Queue {
	q := Queue{
		Topic:    mq.GetTopic().GetName(),
		ID:       mq.GetId(),
		Broker:   mq.GetBroker().GetName(),
		BrokerID: mq.GetBroker().GetId(),
		Endpoint: fallback,
	}
	switch mq.GetPermission() {
	case rmqpb.Permission_READ:
		q.Permission = PermRead
	case rmqpb.Permission_WRITE:
		q.Permission = PermWrite
	case rmqpb.Permission_READ_WRITE:
		q.Permission = PermReadWrite
	}
	if addrs := mq.GetBroker().GetEndpoints().GetAddresses(); len(addrs) > 0 && addrs[0].GetHost() != "" && addrs[0].GetPort() > 0 {
		q.Endpoint = net.JoinHostPort(addrs[0].GetHost(), strconv.Itoa(int(addrs[0].GetPort())))
	}
	for _, t := range mq.GetAcceptMessageTypes() {
		if mt := messageTypeFromPB(t); mt != TypeUnspecified {
			q.AcceptTypes = append(q.AcceptTypes, mt)
		}
	}
	return q
}

// Route is the queues of one topic as seen through one access point. A
// Route is immutable once returned.
type Route struct {
	Topic string
	// AccessPoint is the endpoint the route was asked from.
	AccessPoint string
	Queues      []Queue
	UpdatedAt   time.Time
}

// WritableQueues returns the master queues one can send to.
func (r *Route) WritableQueues() []Queue { return r.filter(Queue.Writable) }

// ReadableQueues returns the master queues one can receive from.
func (r *Route) ReadableQueues() []Queue { return r.filter(Queue.Readable) }

func (r *Route) filter(keep func(Queue) bool) []Queue {
	out := make([]Queue, 0, len(r.Queues))
	for _, q := range r.Queues {
		if keep(q) {
			out = append(out, q)
		}
	}
	return out
}

// Endpoints returns the distinct endpoints of the route's queues, in order
// of first appearance.
func (r *Route) Endpoints() []string {
	var out []string
	seen := map[string]bool{}
	for _, q := range r.Queues {
		if !seen[q.Endpoint] {
			seen[q.Endpoint] = true
			out = append(out, q.Endpoint)
		}
	}
	return out
}

type routeKey struct{ accessPoint, topic string }

type routeEntry struct {
	lock  chan struct{} // one query at a time per key; ctx-aware
	route *Route        // guarded by routeCache.mu
}

// routeCache keeps the latest route per (access point, topic): the same
// topic name can live on two clusters reached through different access
// points.
type routeCache struct {
	mu      sync.RWMutex
	entries map[routeKey]*routeEntry
}

func (rc *routeCache) init() { rc.entries = make(map[routeKey]*routeEntry) }

func (rc *routeCache) entry(k routeKey) *routeEntry {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := rc.entries[k]
	if e == nil {
		e = &routeEntry{lock: make(chan struct{}, 1)}
		rc.entries[k] = e
	}
	return e
}

func (rc *routeCache) get(k routeKey) *Route {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if e := rc.entries[k]; e != nil {
		return e.route
	}
	return nil
}

func (rc *routeCache) set(k routeKey, r *Route) {
	rc.mu.Lock()
	rc.entries[k].route = r
	rc.mu.Unlock()
}

// keys lists the keys holding a route. A key whose first query failed (a
// mistyped or missing topic) is left out: Route queries it again on its
// next use, and refreshing it in the background would only repeat the
// failure against the server every interval, for as long as the client
// lives.
func (rc *routeCache) keys() []routeKey {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	out := make([]routeKey, 0, len(rc.entries))
	for k, e := range rc.entries {
		if e.route != nil {
			out = append(out, k)
		}
	}
	return out
}

// Route returns the cached route of topic through accessPoint, querying it
// on the first use. Cached routes are refreshed in the background.
func (c *Client) Route(ctx context.Context, accessPoint, topic string) (*Route, error) {
	k := routeKey{accessPoint, topic}
	if r := c.routes.get(k); r != nil {
		return r, nil
	}
	return c.refreshRoute(ctx, k, false)
}

// RefreshRoute queries the route of topic through accessPoint now and
// caches it, e.g. after sends to a route's queues failed.
func (c *Client) RefreshRoute(ctx context.Context, accessPoint, topic string) (*Route, error) {
	return c.refreshRoute(ctx, routeKey{accessPoint, topic}, true)
}

func (c *Client) refreshRoute(ctx context.Context, k routeKey, force bool) (*Route, error) {
	e := c.routes.entry(k)
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, transportError(ctx, ctx.Err(), "QueryRoute", k.accessPoint)
	}
	defer func() { <-e.lock }()
	old := c.routes.get(k)
	if old != nil && !force {
		return old, nil // someone else fetched it while we waited
	}
	r, err := c.QueryRoute(ctx, k.accessPoint, k.topic)
	if err != nil && old != nil && Retryable(err) {
		// The access point is down: ask the other endpoints of the last
		// known route, which serve the same cluster.
		for _, ep := range old.Endpoints() {
			if ep == k.accessPoint {
				continue
			}
			var ferr error
			if r, ferr = c.QueryRoute(ctx, ep, k.topic); ferr == nil {
				r.AccessPoint = k.accessPoint
				err = nil
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	c.routes.set(k, r)
	return r, nil
}

// QueryRoute asks endpoint for the route of topic, bypassing the cache.
func (c *Client) QueryRoute(ctx context.Context, endpoint, topic string) (*Route, error) {
	const rpc = "QueryRoute"
	if topic == "" {
		return nil, clientError(ErrBadRequest, rpc, endpoint, "topic is empty")
	}
	ep, err := c.prepare(ctx, endpoint, rpc)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	cctx, cancel := c.callCtx(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := ep.stub.QueryRoute(cctx, &rmqpb.QueryRouteRequest{Topic: c.resource(topic), Endpoints: ep.pbep})
	if err = c.finish(ctx, rpc, ep.addr, start, err, resp.GetStatus()); err != nil {
		return nil, err
	}
	r := &Route{Topic: topic, AccessPoint: endpoint, UpdatedAt: time.Now(), Queues: make([]Queue, 0, len(resp.GetMessageQueues()))}
	for _, mq := range resp.GetMessageQueues() {
		r.Queues = append(r.Queues, queueFromPB(mq, endpoint))
	}
	return r, nil
}

func (c *Client) routeRefreshLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.RouteRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-c.root.Done():
			return
		case <-t.C:
		}
		for _, k := range c.routes.keys() {
			ctx, cancel := context.WithTimeout(c.root, 2*c.cfg.RequestTimeout)
			_, err := c.refreshRoute(ctx, k, true)
			cancel()
			if err != nil && c.root.Err() == nil {
				c.log.Warn("route refresh failed; keeping the last route", zap.String("topic", k.topic),
					zap.String("access_point", k.accessPoint), zap.Error(err))
			}
		}
	}
}

// finish records a unary call's outcome and returns its error: the
// transport error, or the in-body status when it is not a success.
func (c *Client) finish(ctx context.Context, rpc, endpoint string, start time.Time, err error, st *rmqpb.Status) error {
	return c.finishStatus(ctx, rpc, endpoint, start, err, statusOf(st))
}

// finishStatus is finish for a status the call decoded itself (the send
// path).
func (c *Client) finishStatus(ctx context.Context, rpc, endpoint string, start time.Time, err error, st wireStatus) error {
	if err != nil {
		err = transportError(ctx, err, rpc, endpoint)
	} else {
		err = st.err(rpc, endpoint)
	}
	c.met.observe(rpc, start, err)
	return err
}
