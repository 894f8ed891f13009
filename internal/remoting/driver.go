package remoting

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// maxConcurrentChecks bounds the checker calls in flight, and
// checkTimeout one of them (the gRPC driver's bounds).
const (
	maxConcurrentChecks = 8
	checkTimeout        = time.Minute
)

// ProducerGroupPrefix starts the producer group of a physical topic (see
// ProducerGroupOf).
const ProducerGroupPrefix = "twinmq-producer-"

// ProducerGroupOf is the producer group a ProducerClient sends a topic's
// messages under: one group per physical topic, so that a broker asks only
// producers of that topic about its half messages.
func ProducerGroupOf(topic string) string { return ProducerGroupPrefix + topic }

// DefaultMaxBody is the largest body (and batch body) a ProducerClient
// sends: RocketMQ brokers' default maxMessageSize, 4 MiB.
const DefaultMaxBody = 4 << 20

// ErrDelayUnsupported: a message with a delivery time was sent to a broker
// without the timer (RocketMQ 4.x knows only 18 fixed delay levels). It
// wraps rmqerr.ErrUnsupported; the producer does not retry it, and never
// falls back to a delay level.
var ErrDelayUnsupported = fmt.Errorf("remoting: the broker cannot deliver a message at an arbitrary time (RocketMQ 4.x has no timer, only fixed delay levels): %w", rmqerr.ErrUnsupported)

// ProducerConfig configures a ProducerClient.
type ProducerConfig struct {
	// Cluster names the cluster in logs.
	Cluster string
	// NameServers are the cluster's name servers; Route starts with the
	// access point it is given and fails over to the others.
	NameServers []string
	// Topics are the physical topics published at first (SetTopics).
	Topics []string
	// RequestTimeout bounds the client's own calls (heartbeats, route
	// refreshes, unregister); default 3 s. Sends are bounded by their ctx.
	RequestTimeout time.Duration
	// ClientID names this client to the brokers.
	ClientID string
	// OnOrphanedTransaction answers the brokers' CHECK_TRANSACTION_STATE.
	// Without it the checks are left unanswered (the broker asks again).
	OnOrphanedTransaction driver.OrphanedTransactionFunc
	// TLS dials the brokers and name servers over TLS; Credentials sign
	// every request (AccessKey and Signature, as RocketMQ's ACL expects).
	TLS         *tls.Config
	Credentials *driver.Credentials
	// RouteRefreshInterval (default 30 s, as RocketMQ's clients poll the
	// name server) and HeartbeatInterval (default 30 s).
	RouteRefreshInterval time.Duration
	HeartbeatInterval    time.Duration
	// MaxBody is the largest body or batch body sent (DefaultMaxBody).
	MaxBody int
	Logger  *zap.Logger
	// Options are more options of the underlying Client.
	Options []Option
}

// ProducerClient is a producer's client of one remoting cluster, in the
// vocabulary of internal/driver (driver.Message, driver.SendResult,
// driver.Route), so that the producer drives it as it drives the gRPC
// driver's Client. It caches routes and refreshes them from the name
// servers, heartbeats every broker of its routes for the producer groups of
// its topics, answers the brokers' transaction checks, and unregisters on
// Close.
type ProducerClient struct {
	cfg ProducerConfig
	c   *Client
	log *zap.Logger

	topics atomic.Pointer[[]string]

	mu      sync.Mutex
	routes  map[string]*routeSlot // by topic
	brokers map[string]*brokerLink
	nsByAP  map[string]*NameServer
	closed  bool

	ids  *IDGenerator  // for a message sent without an id
	kick chan struct{} // asks the loop for a heartbeat round now
	// checking bounds the transaction checks that run the checker at once,
	// as the gRPC driver does: a broker asking about many half messages
	// at once gets the rest answered when it asks again.
	checking chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	rr       atomic.Uint32
}

type routeSlot struct {
	lock  chan struct{}
	route *driver.Route // guarded by ProducerClient.mu
	names map[string]string
}

// brokerLink is what the client knows of one broker.
type brokerLink struct {
	version atomic.Int32 // 0: not known yet
	lastErr atomic.Pointer[error]
	name    string
}

// NewProducerClient returns a client; it dials lazily.
func NewProducerClient(cfg ProducerConfig) (*ProducerClient, error) {
	if len(cfg.NameServers) == 0 {
		return nil, fmt.Errorf("cluster %q: %w", cfg.Cluster, ErrNoNameServer)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 3 * time.Second
	}
	if cfg.RouteRefreshInterval <= 0 {
		cfg.RouteRefreshInterval = 30 * time.Second
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 30 * time.Second
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "twinmq@" + NewIDGenerator().Next()
	}
	p := &ProducerClient{cfg: cfg, log: cfg.Logger, routes: map[string]*routeSlot{}, brokers: map[string]*brokerLink{},
		nsByAP: map[string]*NameServer{}, ids: NewIDGenerator(), kick: make(chan struct{}, 1), done: make(chan struct{}),
		checking: make(chan struct{}, maxConcurrentChecks)}
	opts := append([]Option{WithLogger(cfg.Logger)}, cfg.Options...)
	if cfg.TLS != nil {
		opts = append(opts, WithTLS(cfg.TLS))
	}
	if cr := cfg.Credentials; cr != nil {
		opts = append(opts, WithCredentials(cr.AccessKey, cr.SecretKey))
	}
	opts = append(opts, WithHandler(p.handle))
	p.c = New(opts...)
	topics := slices.Clone(cfg.Topics)
	p.topics.Store(&topics)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.loop()
	return p, nil
}

// closedErr is the error of a call on a closed client: driver.ErrClosed,
// which the producer reads as "its successor takes over".
func closedErr(err error) error {
	if errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	return err
}

// nameServer returns the name server client that asks ap first, then the
// cluster's other name servers.
func (p *ProducerClient) nameServer(ap string) *NameServer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ns := p.nsByAP[ap]; ns != nil {
		return ns
	}
	addrs := []string{ap}
	for _, a := range p.cfg.NameServers {
		if a != ap {
			addrs = append(addrs, a)
		}
	}
	ns, _ := NewNameServer(p.c, addrs)
	p.nsByAP[ap] = ns
	return ns
}

// Route returns topic's route, cached; the first use asks the name servers
// (accessPoint first), later ones read the cache, which a background loop
// refreshes. Each queue's Endpoint is its broker master's address, Broker
// its broker name; only masters (BrokerID 0) are listed.
func (p *ProducerClient) Route(ctx context.Context, accessPoint, topic string) (*driver.Route, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, closedErr(ErrClosed)
	}
	s := p.routes[topic]
	if s == nil {
		s = &routeSlot{lock: make(chan struct{}, 1)}
		p.routes[topic] = s
	}
	r := s.route
	p.mu.Unlock()
	if r != nil {
		return r, nil
	}
	return p.refresh(ctx, accessPoint, topic, s, false)
}

func (p *ProducerClient) refresh(ctx context.Context, ap, topic string, s *routeSlot, force bool) (*driver.Route, error) {
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, timeoutErr(ap, ctx.Err())
	}
	defer func() { <-s.lock }()
	p.mu.Lock()
	old := s.route
	p.mu.Unlock()
	if old != nil && !force {
		return old, nil
	}
	rr, err := p.nameServer(ap).Route(ctx, topic)
	if err != nil {
		return nil, closedErr(err)
	}
	r, names := convertRoute(topic, ap, rr)
	newBroker := false
	p.mu.Lock()
	s.route, s.names = r, names
	for addr, name := range names {
		if p.brokers[addr] == nil {
			p.brokers[addr] = &brokerLink{name: name}
			newBroker = true
		}
	}
	p.mu.Unlock()
	if newBroker {
		// A broker the client did not know: tell it the producer groups
		// now, so that its transaction checks find this client.
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return r, nil
}

// convertRoute maps a name server's route to the driver's; names maps each
// master's address to its broker name.
func convertRoute(topic, ap string, rr *Route) (*driver.Route, map[string]string) {
	r := &driver.Route{Topic: topic, AccessPoint: ap, UpdatedAt: time.Now()}
	names := map[string]string{}
	for _, q := range rr.Queues {
		addr, ok := rr.BrokerAddr(q.BrokerName)
		if !ok {
			continue
		}
		names[addr] = q.BrokerName
		for i := range max(q.ReadQueueNums, q.WriteQueueNums) {
			read := q.Perm&PermRead != 0 && i < q.ReadQueueNums
			write := q.Perm&PermWrite != 0 && i < q.WriteQueueNums
			var perm driver.Permission
			switch {
			case read && write:
				perm = driver.PermReadWrite
			case read:
				perm = driver.PermRead
			case write:
				perm = driver.PermWrite
			}
			r.Queues = append(r.Queues, driver.Queue{Topic: topic, ID: int32(i), Permission: perm,
				Broker: q.BrokerName, BrokerID: MasterID, Endpoint: addr})
		}
	}
	slices.SortStableFunc(r.Queues, func(a, b driver.Queue) int {
		if c := strings.Compare(a.Broker, b.Broker); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	return r, names
}

// link returns the state of the broker at addr, creating it.
func (p *ProducerClient) link(addr string) *brokerLink {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.brokers[addr]
	if b == nil {
		b = &brokerLink{}
		p.brokers[addr] = b
	}
	return b
}

func (b *brokerLink) note(err error) {
	if err == nil {
		b.lastErr.Store(nil)
		return
	}
	b.lastErr.Store(&err)
}

// Heartbeat sends HEART_BEAT to the broker at addr for the producer groups
// of the client's topics, and learns the broker's version from the answer.
// The client also sends one every HeartbeatInterval to every broker of its
// routes, as RocketMQ's clients do.
func (p *ProducerClient) Heartbeat(ctx context.Context, addr string) error {
	b := p.link(addr)
	err := p.heartbeat(ctx, addr, b)
	b.note(err)
	return err
}

func (p *ProducerClient) heartbeat(ctx context.Context, addr string, b *brokerLink) error {
	hb := heartbeatData{ClientID: p.cfg.ClientID, ProducerDataSet: []producerData{}, ConsumerDataSet: []any{}}
	for _, t := range *p.topics.Load() {
		hb.ProducerDataSet = append(hb.ProducerDataSet, producerData{GroupName: ProducerGroupOf(t)})
	}
	body, err := json.Marshal(&hb)
	if err != nil {
		return err
	}
	resp, err := p.c.Invoke(ctx, addr, &wire.Header{Code: wire.CodeHeartbeat}, body)
	if err != nil {
		return closedErr(err)
	}
	if err := CheckResponse(addr, resp); err != nil {
		return err
	}
	b.version.Store(resp.Version)
	return nil
}

// SetTopics names the physical topics the client publishes: their producer
// groups are the ones its heartbeats announce. A change is announced at
// once.
func (p *ProducerClient) SetTopics(topics []string) error {
	ts := slices.Clone(topics)
	old := p.topics.Swap(&ts)
	if !slices.Equal(*old, ts) {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// EndpointState reports the connection to the broker at addr; Err is the
// latest failure of a heartbeat or send there (nil after a success).
func (p *ProducerClient) EndpointState(addr string) driver.EndpointState {
	dialled, up := p.c.linkState(addr)
	if !dialled {
		return driver.EndpointState{}
	}
	st := driver.EndpointState{Dialled: true, Connected: up}
	p.mu.Lock()
	b := p.brokers[addr]
	p.mu.Unlock()
	if b != nil {
		if e := b.lastErr.Load(); e != nil {
			st.Err = *e
		}
	}
	return st
}

// loop heartbeats every known broker every HeartbeatInterval (and when
// kicked), and refreshes the cached routes every RouteRefreshInterval.
func (p *ProducerClient) loop() {
	defer close(p.done)
	hb := time.NewTicker(p.cfg.HeartbeatInterval)
	defer hb.Stop()
	rt := time.NewTicker(p.cfg.RouteRefreshInterval)
	defer rt.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-hb.C:
			p.heartbeatAll()
		case <-p.kick:
			p.heartbeatAll()
		case <-rt.C:
			p.refreshAll()
		}
	}
}

func (p *ProducerClient) heartbeatAll() {
	p.mu.Lock()
	addrs := make(map[string]*brokerLink, len(p.brokers))
	for a, b := range p.brokers {
		addrs[a] = b
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for a, b := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(p.ctx, p.cfg.RequestTimeout)
			defer cancel()
			err := p.heartbeat(ctx, a, b)
			b.note(err)
			if err != nil && p.ctx.Err() == nil {
				p.log.Debug("remoting heartbeat failed", zap.String("cluster", p.cfg.Cluster), zap.String("broker", a), zap.Error(err))
			}
		}()
	}
	wg.Wait()
}

func (p *ProducerClient) refreshAll() {
	type known struct {
		s  *routeSlot
		ap string
	}
	p.mu.Lock()
	slots := make(map[string]known, len(p.routes))
	for t, s := range p.routes {
		if s.route != nil {
			slots[t] = known{s, s.route.AccessPoint}
		}
	}
	p.mu.Unlock()
	for t, k := range slots {
		ctx, cancel := context.WithTimeout(p.ctx, 2*p.cfg.RequestTimeout)
		_, err := p.refresh(ctx, k.ap, t, k.s, true)
		cancel()
		if err != nil && p.ctx.Err() == nil {
			p.log.Warn("remoting route refresh failed; keeping the last route", zap.String("cluster", p.cfg.Cluster),
				zap.String("topic", t), zap.Error(err))
		}
	}
}

// version returns the broker's MQVersion ordinal, asking with a heartbeat
// when it is not known yet.
func (p *ProducerClient) version(ctx context.Context, addr string) (Version, error) {
	b := p.link(addr)
	if v := Version(b.version.Load()); v.Known() {
		return v, nil
	}
	if err := p.Heartbeat(ctx, addr); err != nil {
		return VersionUnknown, err
	}
	return Version(b.version.Load()), nil
}

// target names where msgs go: the queue the producer chose (for AnyQueue,
// one of the broker's writable queues in turn) and the broker's name.
func (p *ProducerClient) target(addr, topic string, queue int32) SendTarget {
	t := SendTarget{Addr: addr, QueueID: queue, ProducerGroup: ProducerGroupOf(topic)}
	p.mu.Lock()
	s := p.routes[topic]
	var r *driver.Route
	if s != nil {
		r, t.BrokerName = s.route, s.names[addr]
	}
	p.mu.Unlock()
	if queue == driver.AnyQueue {
		t.QueueID = 0
		if r != nil {
			var ids []int32
			for _, q := range r.WritableQueues() {
				if q.Endpoint == addr {
					ids = append(ids, q.ID)
				}
			}
			if len(ids) > 0 {
				t.QueueID = ids[int(p.rr.Add(1))%len(ids)]
			}
		}
	}
	return t
}

// SendInto sends msgs (one topic) to the broker at addr: one message with
// SEND_MESSAGE_V2, several with SEND_BATCH_MESSAGE (split into requests of
// at most MaxBody bytes of bodies; a later part that fails gives its
// messages an Err while the earlier part's results stand). Results are
// appended to into[:0], one per message.
//
// A message with a DeliveryTime needs a broker with the timer (5.x): the
// time is sent as TIMER_DELIVER_MS; a 4.x broker gets nothing and the
// error is ErrDelayUnsupported. A body over MaxBody is refused before
// anything is sent (rmqerr.ErrTooLarge).
func (p *ProducerClient) SendInto(ctx context.Context, addr string, msgs []*driver.Message, into []driver.SendResult) ([]driver.SendResult, error) {
	if len(msgs) == 0 {
		return nil, fmt.Errorf("remoting %s: %w: no message", addr, rmqerr.ErrBadRequest)
	}
	topic := msgs[0].Topic
	delayed := false
	for i, m := range msgs {
		if len(m.Body) > p.cfg.MaxBody {
			return nil, fmt.Errorf("remoting %s: message %d: body of %d bytes exceeds the broker's %d: %w", addr, i, len(m.Body), p.cfg.MaxBody, rmqerr.ErrTooLarge)
		}
		if m.Topic != topic {
			return nil, fmt.Errorf("%w: message %d is for topic %q, the request for %q", ErrInvalidMessage, i, m.Topic, topic)
		}
		delayed = delayed || !m.DeliveryTime.IsZero()
	}
	if delayed {
		v, err := p.version(ctx, addr)
		if err != nil {
			return nil, err
		}
		if !v.HasTimer() {
			return nil, fmt.Errorf("remoting %s: broker version %s (MQVersion ordinal %d, below 5.0.0's %d): %w", addr, v, int32(v), int32(V5_0_0), ErrDelayUnsupported)
		}
	}
	t := p.target(addr, topic, msgs[0].QueueID)
	into = into[:0]
	rms := make([]*Message, len(msgs))
	for i, m := range msgs {
		rms[i] = toMessage(m)
		if rms[i].ID == "" {
			rms[i].ID = p.ids.Next() // the producer always gives one
		}
	}
	b := p.link(addr)
	if len(rms) == 1 {
		r, err := p.c.Send(ctx, nil, t, rms[0])
		b.note(sendNote(err))
		if err != nil {
			return nil, closedErr(err)
		}
		return append(into, p.result(r, rms[0].Transaction)), nil
	}
	for start := 0; start < len(rms); {
		end, size := start, 0
		for end < len(rms) && (end == start || size+len(rms[end].Body) <= p.cfg.MaxBody) {
			size += len(rms[end].Body)
			end++
		}
		rs, err := p.c.SendBatch(ctx, nil, t, rms[start:end])
		b.note(sendNote(err))
		if err != nil {
			err = closedErr(err)
			if start == 0 {
				return nil, err
			}
			for _, m := range rms[start:] {
				into = append(into, driver.SendResult{MessageID: m.ID, QueueID: t.QueueID, Err: err})
			}
			return into, nil
		}
		for _, r := range rs {
			into = append(into, p.result(r, false))
		}
		start = end
	}
	return into, nil
}

// sendNote is what a send's failure says of the link: a refusal of the
// message is not a failing broker.
func sendNote(err error) error {
	if err == nil || errors.Is(err, rmqerr.ErrUnavailable) || errors.Is(err, rmqerr.ErrTimeout) {
		return err
	}
	return nil
}

func toMessage(m *driver.Message) *Message {
	rm := &Message{Topic: m.Topic, Tag: m.Tag, Keys: m.Keys, Group: m.Group, TraceContext: m.TraceContext,
		Properties: m.Properties, Body: m.Body, ID: m.ID, Transaction: m.Transactional}
	if !m.DeliveryTime.IsZero() {
		props := make(map[string]string, len(m.Properties)+1)
		for k, v := range m.Properties {
			props[k] = v
		}
		props[wire.PropDeliverMS] = strconv.FormatInt(m.DeliveryTime.UnixMilli(), 10)
		rm.Properties = props
	}
	return rm
}

// result maps a remoting send result. A half message's TransactionID
// carries what END_TRANSACTION needs besides the message id: the queue
// offset, the commit log offset (from the broker's offset message id) and
// the broker's transaction id, as "<queueOffset>:<commitLogOffset>:<id>".
func (p *ProducerClient) result(r SendResult, half bool) driver.SendResult {
	out := driver.SendResult{MessageID: r.ID, QueueID: r.QueueID, Offset: r.QueueOffset}
	if half {
		txID := r.TransactionID
		if txID == "" {
			txID = r.ID // RocketMQ's clients use the message id
		}
		out.TransactionID = fmt.Sprintf("%d:%d:%s", r.QueueOffset, r.CommitLogOffset, txID)
	}
	return out
}

// parseTxID splits a TransactionID made by result.
func parseTxID(s string) (queueOff, logOff int64, txID string, err error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) != 3 {
		return 0, 0, "", fmt.Errorf("%w: transaction id %q was not made by this driver", ErrInvalidMessage, s)
	}
	queueOff, err1 := strconv.ParseInt(parts[0], 10, 64)
	logOff, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil || parts[2] == "" {
		return 0, 0, "", fmt.Errorf("%w: transaction id %q was not made by this driver", ErrInvalidMessage, s)
	}
	return queueOff, logOff, parts[2], nil
}

// EndTransaction commits or rolls back a half message with END_TRANSACTION
// (oneway) at the broker that stored it; txID is the SendResult's.
func (p *ProducerClient) EndTransaction(ctx context.Context, addr, topic, messageID, txID string, r driver.TransactionResolution) error {
	var res Resolution
	switch r {
	case driver.TransactionCommit:
		res = Commit
	case driver.TransactionRollback:
		res = Rollback
	default:
		return fmt.Errorf("%w: resolution must be commit or rollback", ErrInvalidMessage)
	}
	qoff, loff, id, err := parseTxID(txID)
	if err != nil {
		return err
	}
	return closedErr(p.c.EndTransaction(ctx, EndTransaction{Addr: addr, ProducerGroup: ProducerGroupOf(topic), Topic: topic,
		MessageID: messageID, TransactionID: id, QueueOffset: qoff, CommitLogOff: loff, Resolution: res}))
}

// systemProps are properties RocketMQ writes for itself, left out of the
// user properties a transaction check hands the checker.
var systemProps = map[string]bool{
	wire.PropKeys: true, wire.PropTags: true, wire.PropWait: true, wire.PropUniqKey: true, wire.PropShardingKey: true,
	wire.PropTraceContext: true, wire.PropTranMsg: true, wire.PropProducerGroup: true, wire.PropDeliverMS: true,
	"REAL_TOPIC": true, "REAL_QID": true, "MSG_REGION": true, "TRACE_ON": true, "TRAN_PREPARED_QUEUE_OFFSET": true,
	"__transactionId__": true, "TRANSACTION_CHECK_TIMES": true, "CHECK_IMMUNITY_TIME_IN_SECONDS": true,
	"CLUSTER": true, "MIN_OFFSET": true, "MAX_OFFSET": true, "TIMER_OUT_MS": true, "DELAY": true,
}

// handle answers the requests brokers send: CHECK_TRANSACTION_STATE goes
// to the orphan handler, and its resolution back as END_TRANSACTION.
func (p *ProducerClient) handle(ctx context.Context, addr string, req *wire.Command) (*wire.Header, []byte) {
	if req.Code != wire.CodeCheckTransactionState {
		return nil, nil
	}
	fn := p.cfg.OnOrphanedTransaction
	if fn == nil {
		p.log.Debug("remoting transaction check left unanswered: no checker", zap.String("broker", addr))
		return &wire.Header{}, nil
	}
	select {
	case p.checking <- struct{}{}:
		defer func() { <-p.checking }()
	default:
		p.log.Debug("remoting transaction check left for later: too many checks in flight", zap.String("broker", addr))
		return &wire.Header{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	tc, err := ParseTransactionCheck(addr, req)
	if err != nil {
		p.log.Warn("remoting transaction check unreadable", zap.String("broker", addr), zap.Error(err))
		return &wire.Header{Code: wire.RespSystemError, Remark: err.Error()}, nil
	}
	m := &tc.Message
	rm := &driver.ReceivedMessage{Topic: m.Topic, ID: tc.MessageID, Tag: m.Properties[wire.PropTags],
		Group: m.Properties[wire.PropShardingKey], Type: driver.TypeTransaction, Properties: map[string]string{},
		Body: m.Body, BornHost: m.BornHost, StoreHost: m.StoreHost, TraceContext: m.Properties[wire.PropTraceContext],
		QueueID: m.QueueID, QueueOffset: m.QueueOffset, Endpoint: addr}
	if m.BornTimestamp > 0 {
		rm.BornTime = time.UnixMilli(m.BornTimestamp)
	}
	if m.StoreTimestamp > 0 {
		rm.StoreTime = time.UnixMilli(m.StoreTimestamp)
	}
	for _, k := range strings.Split(m.Properties[wire.PropKeys], " ") {
		if k != "" {
			rm.Keys = append(rm.Keys, k)
		}
	}
	for k, v := range m.Properties {
		if !systemProps[k] {
			rm.Properties[k] = v
		}
	}
	if m.SysFlag&wire.SysCompressed != 0 {
		rm.Err = fmt.Errorf("message %s: %w: compressed bodies are not decoded yet", rm.ID, driver.ErrCorrupted)
	}
	var res Resolution
	switch fn(ctx, addr, rm, tc.TransactionID) {
	case driver.TransactionCommit:
		res = Commit
	case driver.TransactionRollback:
		res = Rollback
	default:
		return &wire.Header{}, nil // the broker asks again later
	}
	group := m.Properties[wire.PropProducerGroup]
	if group == "" {
		group = ProducerGroupOf(m.Topic)
	}
	ectx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	if err := p.c.EndTransaction(ectx, EndTransaction{Addr: addr, ProducerGroup: group, Topic: m.Topic, MessageID: tc.MessageID,
		TransactionID: tc.TransactionID, QueueOffset: tc.QueueOffset, CommitLogOff: tc.CommitLogOff, Resolution: res, FromCheck: true}); err != nil {
		p.log.Warn("remoting transaction check: end transaction failed", zap.String("broker", addr), zap.Error(err))
	}
	return &wire.Header{}, nil
}

// Close unregisters the client's producer groups from the brokers it knows
// (bounded by ctx), stops its background work and closes its connections.
func (p *ProducerClient) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return nil
	}
	p.closed = true
	addrs := make([]string, 0, len(p.brokers))
	for a := range p.brokers {
		addrs = append(addrs, a)
	}
	p.mu.Unlock()
	p.cancel()
	<-p.done
	var wg sync.WaitGroup
	for _, a := range addrs {
		for _, t := range *p.topics.Load() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
				defer cancel()
				if err := p.c.Unregister(cctx, a, p.cfg.ClientID, ProducerGroupOf(t)); err != nil {
					p.log.Debug("remoting unregister failed", zap.String("broker", a), zap.Error(err))
				}
			}()
		}
	}
	wg.Wait()
	return p.c.Close()
}

// linkState reports whether the client has a connection state for addr
// (it was used) and whether its connection is up.
func (c *Client) linkState(addr string) (dialled, up bool) {
	c.mu.Lock()
	cn := c.conns[addr]
	c.mu.Unlock()
	if cn == nil {
		return false, false
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return true, cn.cur != nil
}
