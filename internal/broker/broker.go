package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	"github.com/twinmq/twinmq/internal/broker/auth"
	"github.com/twinmq/twinmq/internal/broker/timer"
	"github.com/twinmq/twinmq/internal/broker/txn"
	"github.com/twinmq/twinmq/internal/pb/pbcodec"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/store"
)

// ErrStarted: Start was called on a broker that was started (or closed)
// before. A Broker runs once; restart with a new one.
var ErrStarted = errors.New("broker: already started")

// Broker is one RocketMQ 5 gRPC endpoint (the proxy's Local mode) over one
// store. Create it with New, then Start; Close stops it. A Broker is not
// restartable: to restart, make a new one with the same Config (same data
// dir and listen address).
type Broker struct {
	cfg Config
	log *zap.Logger
	met *metrics

	mu      sync.RWMutex
	topics  map[string]Topic
	groups  map[string]Group
	peers   []Peer
	subs    map[subKey]*groupTopic
	rr      map[string]*atomic.Uint64
	clients map[string]*client

	store     *store.Store
	timer     *timer.Timer     // delayed messages (features.go)
	txn       *txn.Manager     // transactional messages (features.go)
	auth      *auth.Authorizer // nil: no access control
	srv       *grpc.Server
	lis       net.Listener
	addr      string
	routeAddr string          // what QueryRoute names: Config.Advertise, else addr
	rem       *remotingServer // nil without Config.RemotingListen
	state     atomic.Int32    // 0 new, 1 running, 2 closed
	stop      chan struct{}
	wg        sync.WaitGroup
	closed    chan struct{}
	closeOnce sync.Once

	nonce         atomic.Uint64
	progressVer   atomic.Uint64
	progressSaved atomic.Uint64
}

type subKey struct{ group, topic string }

// New validates cfg and returns a broker ready to Start.
func New(cfg Config) (*Broker, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	met, err := newMetrics(cfg.Registerer, cfg.Cluster, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: broker %s: %w", ErrInvalidConfig, cfg.Name, err)
	}
	b := &Broker{
		cfg:     cfg,
		log:     cfg.Logger.With(zap.String("cluster", cfg.Cluster), zap.String("broker", cfg.Name)),
		met:     met,
		topics:  map[string]Topic{},
		groups:  map[string]Group{},
		peers:   append([]Peer(nil), cfg.Peers...),
		subs:    map[subKey]*groupTopic{},
		rr:      map[string]*atomic.Uint64{},
		clients: map[string]*client{},
		stop:    make(chan struct{}),
		closed:  make(chan struct{}),
	}
	for _, t := range cfg.Topics {
		b.topics[t.Name] = t
		b.rr[t.Name] = new(atomic.Uint64)
	}
	for _, g := range cfg.Groups {
		b.groups[g.Name] = g
	}
	if cfg.Security.Auth != nil {
		a, err := auth.New(*cfg.Security.Auth)
		if err != nil {
			return nil, fmt.Errorf("%w: broker %s: %w", ErrInvalidConfig, cfg.Name, err)
		}
		b.auth = a
	}
	return b, nil
}

// Name returns the broker name.
func (b *Broker) Name() string { return b.cfg.Name }

// Cluster returns the cluster name.
func (b *Broker) Cluster() string { return b.cfg.Cluster }

// Start opens the store, restores consumer progress and serves gRPC. The
// context bounds the store's recovery.
func (b *Broker) Start(ctx context.Context) error {
	if !b.state.CompareAndSwap(0, 1) {
		return ErrStarted
	}
	opts := b.cfg.Store
	opts.Dir = filepath.Join(b.cfg.DataDir, "store")
	if opts.Logger == nil {
		opts.Logger = b.log.Named("store")
	}
	if opts.MaxMessageSize == 0 {
		// Room for a body at the protocol limit plus its properties.
		opts.MaxMessageSize = b.cfg.Limits.MaxBodySize + 2*b.cfg.Limits.MaxPropertiesSize + 64<<10
	}
	st, err := store.Open(ctx, opts)
	if err != nil {
		return b.startFailed(fmt.Errorf("broker %s: open store: %w", b.cfg.Name, err))
	}
	b.store = st
	for _, t := range b.cfg.Topics {
		if t.BatchCQ {
			if err := st.SetTopicOptions(t.Name, store.TopicOptions{BatchCQ: true}); err != nil {
				_ = st.Close()
				return b.startFailed(fmt.Errorf("broker %s: topic %s: %w", b.cfg.Name, t.Name, err))
			}
		}
	}
	b.nonce.Store(uint64(time.Now().UnixNano()))
	if err := b.loadProgress(); err != nil {
		_ = st.Close()
		return b.startFailed(err)
	}
	if err := b.openHeld(ctx); err != nil {
		_ = st.Close()
		return b.startFailed(err)
	}
	lis, err := net.Listen("tcp", b.cfg.Listen)
	if err != nil {
		_ = b.closeHeld()
		_ = st.Close()
		return b.startFailed(fmt.Errorf("broker %s: listen %s: %w", b.cfg.Name, b.cfg.Listen, err))
	}
	b.lis = lis
	b.addr = advertised(lis.Addr())
	b.routeAddr = b.addr
	if b.cfg.Advertise != "" {
		b.routeAddr = b.cfg.Advertise
	}
	pool := pbcodec.NewPool()
	b.srv = grpc.NewServer(append(b.serverOptions(), grpc.MaxRecvMsgSize(130<<20), grpc.ForceServerCodecV2(pbcodec.NewWithPool(pool)),
		experimental.BufferPool(pool),
		// Transport sizes for batched requests (see pbcodec.StreamWindow).
		grpc.InitialWindowSize(pbcodec.StreamWindow), grpc.InitialConnWindowSize(pbcodec.ConnWindow),
		grpc.ReadBufferSize(pbcodec.BufferSize), grpc.WriteBufferSize(pbcodec.BufferSize))...)
	b.srv.RegisterService(messagingServiceDesc(), &service{b: b})
	if b.cfg.RemotingListen != "" {
		rl, err := net.Listen("tcp", b.cfg.RemotingListen)
		if err != nil {
			_ = lis.Close()
			_ = b.closeHeld()
			_ = st.Close()
			return b.startFailed(fmt.Errorf("broker %s: remoting listen %s: %w", b.cfg.Name, b.cfg.RemotingListen, err))
		}
		b.rem = newRemotingServer(b, rl)
		b.wg.Add(1)
		go b.rem.serve()
	}
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		if err := b.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			b.log.Error("grpc serve ended", zap.Error(err))
		}
	}()
	go b.background()
	b.log.Info("broker started", zap.String("addr", b.addr))
	return nil
}

// startFailed marks a broker whose Start failed as closed.
func (b *Broker) startFailed(err error) error {
	b.state.Store(2)
	b.closeOnce.Do(func() { close(b.closed) })
	return err
}

// advertised is the address peers and clients dial: the listen address, with
// an unspecified host replaced by loopback.
func advertised(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	host := tcp.IP.String()
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, fmt.Sprint(tcp.Port))
}

// Addr returns the "host:port" the broker serves on ("" before Start).
func (b *Broker) Addr() string {
	if b.state.Load() == 0 {
		return ""
	}
	return b.addr
}

// Close stops serving and writes consumer progress. In-flight RPCs get until
// ctx ends to finish; then connections are cut. Close is idempotent.
func (b *Broker) Close(ctx context.Context) error {
	switch {
	case b.state.CompareAndSwap(0, 2):
		b.closeOnce.Do(func() { close(b.closed) })
		return nil
	case !b.state.CompareAndSwap(1, 2):
		<-b.closed
		return nil
	}
	defer b.closeOnce.Do(func() { close(b.closed) })
	close(b.stop)
	if b.rem != nil {
		b.rem.close()
	}
	done := make(chan struct{})
	go func() {
		b.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		b.srv.Stop()
		<-done
	}
	b.wg.Wait()
	herr := b.closeHeld()
	perr := b.writeProgress()
	serr := b.store.Close()
	b.log.Info("broker stopped")
	return errors.Join(herr, perr, serr)
}

// SetPeers replaces the other brokers of the cluster listed by QueryRoute
// and QueryAssignment (the broker itself is ignored if listed).
func (b *Broker) SetPeers(peers []Peer) error {
	cp := make([]Peer, 0, len(peers))
	for _, p := range peers {
		if err := checkPeer(p); err != nil {
			return err
		}
		if p.Name != b.cfg.Name {
			cp = append(cp, p)
		}
	}
	b.mu.Lock()
	b.peers = cp
	b.mu.Unlock()
	return nil
}

// background runs the checkpoint and auto-renew loops until Close.
func (b *Broker) background() {
	defer b.wg.Done()
	ckpt := time.NewTicker(b.cfg.CheckpointInterval)
	defer ckpt.Stop()
	// At least a millisecond: a tiny AutoRenewAhead must not make a
	// zero-period ticker, which panics.
	renewEvery := max(min(time.Second, b.cfg.Limits.AutoRenewAhead/4), time.Millisecond)
	renew := time.NewTicker(renewEvery)
	defer renew.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-ckpt.C:
			if b.progressVer.Load() != b.progressSaved.Load() {
				if err := b.writeProgress(); err != nil {
					b.log.Error("consumer progress checkpoint failed", zap.Error(err))
				}
			}
		case now := <-renew.C:
			b.expireClients(now)
			b.mu.RLock()
			gts := make([]*groupTopic, 0, len(b.subs))
			for _, g := range b.subs {
				gts = append(gts, g)
			}
			b.mu.RUnlock()
			for _, g := range gts {
				b.renew(g, now, b.clientAlive)
			}
		}
	}
}

func (b *Broker) newNonce() uint64 {
	for {
		if n := b.nonce.Add(1); n != 0 {
			return n
		}
	}
}

func (b *Broker) progressChanged() { b.progressVer.Add(1) }

// topic returns a topic served by the broker: a configured one, or the
// dead-letter topic of a known group (one queue, any message type).
func (b *Broker) topic(name string) (Topic, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if t, ok := b.topics[name]; ok {
		return t, true
	}
	if len(name) > len(dlqPrefix) && name[:len(dlqPrefix)] == dlqPrefix {
		if _, ok := b.groups[name[len(dlqPrefix):]]; ok {
			return Topic{Name: name, Queues: 1, Type: TypeMixed}, true
		}
	}
	return Topic{}, false
}

// group returns a consumer group, creating it with defaults unless the
// config is strict.
func (b *Broker) group(name string) (Group, error) {
	b.mu.RLock()
	g, ok := b.groups[name]
	b.mu.RUnlock()
	if ok {
		return g, nil
	}
	if b.cfg.StrictGroups {
		return Group{}, statusErr(rmqpb.Code_CONSUMER_GROUP_NOT_FOUND, "consumer group %s not found", name)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if g, ok := b.groups[name]; ok {
		return g, nil
	}
	g = Group{Name: name, MaxDeliveryAttempts: b.cfg.Limits.DefaultMaxDeliveries}
	b.groups[name] = g
	return g, nil
}

func (b *Broker) groupTopicFor(group, topic string) *groupTopic {
	k := subKey{group, topic}
	b.mu.RLock()
	g := b.subs[k]
	b.mu.RUnlock()
	if g != nil {
		return g
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if g = b.subs[k]; g == nil {
		g = newGroupTopic(group, topic)
		b.subs[k] = g
	}
	return g
}

// existingGroupTopic returns the state of (group, topic) without creating it.
func (b *Broker) existingGroupTopic(group, topic string) *groupTopic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.subs[subKey{group, topic}]
}

// brokers lists this broker and its peers, sorted by name.
func (b *Broker) brokers() []Peer {
	b.mu.RLock()
	out := append([]Peer{{Name: b.cfg.Name, Endpoint: b.routeAddr}}, b.peers...)
	b.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (b *Broker) nextRR(topic string) uint64 {
	b.mu.RLock()
	c := b.rr[topic]
	b.mu.RUnlock()
	if c == nil {
		b.mu.Lock()
		if c = b.rr[topic]; c == nil {
			c = new(atomic.Uint64)
			b.rr[topic] = c
		}
		b.mu.Unlock()
	}
	return c.Add(1) - 1
}

// deadLetter appends a copy of m to the group's dead-letter topic, recording
// where it came from. reconsume is the copy's reconsume count, which its
// readers see as delivery_attempt - 1: the proxy's values are the attempts
// made when a consumer forwards it, one more when the broker moves a
// message whose attempts ran out (the pop that found it counts).
func (b *Broker) deadLetter(ctx context.Context, group string, m *store.StoredMessage, reconsume int32) error {
	props := make(map[string]string, len(m.Properties)+2)
	for k, v := range m.Properties {
		props[k] = v
	}
	delete(props, propTimerDeliver)
	props[propDLQTopic] = m.Topic
	props[propDLQMessageID] = m.Properties[propUniqKey]
	dl := store.Message{
		Topic:          DLQTopic(group),
		QueueID:        0,
		Flags:          m.Flags &^ FlagTransactionPrepared,
		BornTimestamp:  m.BornTimestamp,
		BornHost:       m.BornHost,
		Tag:            m.Tag,
		ReconsumeTimes: reconsume,
		Properties:     props,
		Body:           m.Body,
	}
	if _, err := b.store.Append(ctx, []store.Message{dl}); err != nil {
		return fmt.Errorf("broker: dead-letter %s/%d@%d to %s: %w", m.Topic, m.QueueID, m.QueueOffset, dl.Topic, err)
	}
	b.met.deadLetters.Inc()
	b.log.Info("message dead-lettered", zap.String("group", group), zap.String("topic", m.Topic),
		zap.Int32("queue", m.QueueID), zap.Int64("offset", m.QueueOffset), zap.Int32("reconsume", reconsume))
	return nil
}
