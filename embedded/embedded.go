package embedded

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/broker"
	"github.com/twinmq/twinmq/internal/store"
)

// ErrInvalidOptions is wrapped by Start's errors for bad Options.
var ErrInvalidOptions = errors.New("embedded: invalid options")

// MessageType is the kind of messages a topic accepts, as RocketMQ 5's
// topic attribute message.type: a broker refuses a message of another kind
// (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE).
type MessageType int

// Topic types.
const (
	// Normal accepts ordinary messages only; the zero value.
	Normal MessageType = iota
	// FIFO accepts messages with a message group only.
	FIFO
	// Delay accepts messages with a delivery time only.
	Delay
	// Transaction accepts transactional (half) messages only.
	Transaction
	// Mixed accepts every kind: what tests that send delayed, FIFO and
	// ordinary messages to one topic want.
	Mixed
)

// String is the constant's name ("FIFO"), or MessageType(n) for a value
// that is none of them.
func (t MessageType) String() string {
	switch t {
	case Normal:
		return "Normal"
	case FIFO:
		return "FIFO"
	case Delay:
		return "Delay"
	case Transaction:
		return "Transaction"
	case Mixed:
		return "Mixed"
	}
	return fmt.Sprintf("MessageType(%d)", int(t))
}

func (t MessageType) internal() (broker.MessageType, error) {
	switch t {
	case Normal:
		return broker.TypeNormal, nil
	case FIFO:
		return broker.TypeFIFO, nil
	case Delay:
		return broker.TypeDelay, nil
	case Transaction:
		return broker.TypeTransaction, nil
	case Mixed:
		return broker.TypeMixed, nil
	}
	return 0, fmt.Errorf("%w: unknown message type %d", ErrInvalidOptions, int(t))
}

// Topic is created on every broker of every cluster.
type Topic struct {
	Name string
	// Queues per broker, default 8.
	Queues int
	// Type is the kind of messages the topic accepts; the zero value is
	// Normal (ordinary messages only), Mixed takes every kind.
	Type MessageType
	// BatchCQ indexes each sent batch as one consume-queue entry (the
	// store's batch consume queue), for topics fed mostly by batches.
	BatchCQ bool
}

// Group is a consumer group known to every broker.
type Group struct {
	Name string
	// MaxDeliveryAttempts before the dead-letter topic, default 17.
	MaxDeliveryAttempts int
	// FIFO makes the group consume orderly.
	FIFO bool
	// RetryBackoff is the retry policy pushed to consumers (default
	// RocketMQ's 1s 5s 10s 30s 1m ...).
	RetryBackoff []time.Duration
}

// FlushMode chooses when the brokers fsync what they store.
type FlushMode int

const (
	// FlushAsync fsyncs periodically (the default).
	FlushAsync FlushMode = iota
	// FlushSync confirms a send only after an fsync covered it.
	FlushSync
)

// String is the constant's name ("FlushSync"), or FlushMode(n) for a value
// that is none of them.
func (m FlushMode) String() string {
	switch m {
	case FlushAsync:
		return "FlushAsync"
	case FlushSync:
		return "FlushSync"
	}
	return fmt.Sprintf("FlushMode(%d)", int(m))
}

// Options configure Start. The zero value starts two clusters of two
// brokers with no topics.
type Options struct {
	// Clusters is the number of clusters, default 2.
	Clusters int
	// BrokersPerCluster, default 2.
	BrokersPerCluster int
	// ClusterNames names the clusters (default "cluster-a", "cluster-b",
	// ...); when set, its length is the number of clusters.
	ClusterNames []string
	Topics       []Topic
	Groups       []Group
	// StrictGroups makes the brokers refuse groups not in Groups
	// (CONSUMER_GROUP_NOT_FOUND); by default they are created on first use.
	StrictGroups bool
	// Dir holds the brokers' data (Dir/<cluster>/<broker>). Empty means a
	// temporary directory, removed by Close.
	Dir   string
	Flush FlushMode
	// MinInvisibleDuration lowers the smallest invisible duration a receive
	// may ask for (the protocol's is 10 s), so redelivery tests run fast.
	MinInvisibleDuration time.Duration
	// MinLongPolling lowers the shortest long poll (the protocol's is 5 s),
	// so an empty receive in a test returns quickly.
	MinLongPolling time.Duration
	// SegmentSize of the brokers' commit logs (default 64 MiB here, to keep
	// test disks small).
	SegmentSize int64
	// MaxDelay is the longest delay a delayed message may have (default
	// the protocol's 1 day; the timer store holds up to 3 days and rolls
	// longer waits over).
	MaxDelay time.Duration
	// TransactionCheck tunes the check-back of orphaned transactions.
	TransactionCheck TransactionCheck
	// TLS, when set, makes every broker serve gRPC and remoting over TLS
	// only, and the name server too, with this configuration (its
	// certificates). Clients must then dial TLS.
	TLS *tls.Config
	// Users turns on access control: every request must be signed with the
	// access key of one of them (RocketMQ 5's HMAC-SHA1 scheme) and is
	// checked against its permissions. Refusals answer UNAUTHORIZED or
	// FORBIDDEN (NO_PERMISSION on the remoting port, whose requests carry
	// the classic remoting signature). Empty means no access control.
	Users []User
	// AuthenticationOnly checks credentials but grants every permission.
	AuthenticationOnly bool
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Registerer receives the brokers' metrics (labelled by cluster and
	// broker); nil means no metrics.
	Registerer prometheus.Registerer
}

// Env is a running set of clusters.
type Env struct {
	clusters   []*Cluster
	dir        string
	tempDir    bool
	nameServer *broker.NameServer
}

// NameServer returns the "host:port" of the environment's in-process
// RocketMQ name server: remoting clients look routes up there
// (GET_ROUTEINFO_BY_TOPIC), and the routes name the brokers' remoting
// endpoints.
func (e *Env) NameServer() string { return e.nameServer.Addr() }

// runningBrokers lists the brokers that serve now, for the name server.
func (e *Env) runningBrokers() []*broker.Broker {
	var out []*broker.Broker
	for _, c := range e.clusters {
		for _, b := range c.brokers {
			b.mu.Lock()
			if b.b != nil {
				out = append(out, b.b)
			}
			b.mu.Unlock()
		}
	}
	return out
}

// Cluster is a group of brokers that list each other in routes.
type Cluster struct {
	// Name of the cluster.
	Name    string
	brokers []*Broker
}

// Clusters returns the clusters, in Options order.
func (e *Env) Clusters() []*Cluster { return append([]*Cluster(nil), e.clusters...) }

// TopicConfig describes, for a configuration document, a logic topic served
// by the physical topic physical on every cluster of the environment: one
// config.Cluster per cluster, with its name and endpoints, the default
// weight, and the clusters' order as priority (the first cluster is the
// local data centre, the next ones take traffic as its health drops). Put
// it in config.Config.Topics under the logic name; adjust weights and
// priorities as a test needs.
func (e *Env) TopicConfig(physical string) config.Topic {
	var t config.Topic
	for i, c := range e.clusters {
		t.Clusters = append(t.Clusters, config.Cluster{Name: c.Name, Endpoints: c.Endpoints(), Topic: physical,
			Weight: config.DefaultWeight, Priority: i})
	}
	return t
}

// Dir is the directory holding the brokers' data.
func (e *Env) Dir() string { return e.dir }

// Brokers returns the cluster's brokers.
func (c *Cluster) Brokers() []*Broker { return append([]*Broker(nil), c.brokers...) }

// Endpoints returns "127.0.0.1:port" of each broker, in Brokers order. An
// endpoint does not change when its broker restarts.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		out[i] = b.Endpoint()
	}
	return out
}

func (o *Options) normalize() error {
	if len(o.ClusterNames) > 0 {
		if o.Clusters != 0 && o.Clusters != len(o.ClusterNames) {
			return fmt.Errorf("%w: Clusters is %d but ClusterNames has %d names", ErrInvalidOptions, o.Clusters, len(o.ClusterNames))
		}
		o.Clusters = len(o.ClusterNames)
	}
	if o.Clusters == 0 {
		o.Clusters = 2
	}
	if o.BrokersPerCluster == 0 {
		o.BrokersPerCluster = 2
	}
	if o.Clusters < 0 || o.BrokersPerCluster < 0 || o.Clusters > 26 || o.BrokersPerCluster > 64 {
		return fmt.Errorf("%w: %d clusters of %d brokers (want 1..26 clusters of 1..64)", ErrInvalidOptions, o.Clusters, o.BrokersPerCluster)
	}
	if len(o.ClusterNames) == 0 {
		for i := 0; i < o.Clusters; i++ {
			o.ClusterNames = append(o.ClusterNames, "cluster-"+string(rune('a'+i)))
		}
	}
	seen := map[string]bool{}
	for _, n := range o.ClusterNames {
		if n == "" || seen[n] || filepath.Base(n) != n || n == "." || n == ".." {
			return fmt.Errorf("%w: cluster name %q is empty, repeated or not a plain file name", ErrInvalidOptions, n)
		}
		seen[n] = true
	}
	if o.Flush != FlushAsync && o.Flush != FlushSync {
		return fmt.Errorf("%w: unknown flush mode %d", ErrInvalidOptions, int(o.Flush))
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 64 << 20
	}
	return nil
}

// brokerConfig builds the config of one broker from the options.
func (o *Options) brokerConfig(cluster, name, dir string) (broker.Config, error) {
	cfg := broker.Config{
		Cluster: cluster,
		Name:    name,
		Listen:  "127.0.0.1:0",
		// Every embedded broker also speaks the classic remoting
		// protocol, on a port of its own (Broker.RemotingEndpoint).
		RemotingListen: "127.0.0.1:0",
		DataDir:        dir,
		StrictGroups:   o.StrictGroups,
		Limits: broker.Limits{
			MinInvisible:   o.MinInvisibleDuration,
			MinLongPolling: o.MinLongPolling,
		},
		Store:      store.Options{SegmentSize: o.SegmentSize},
		Faults:     &broker.Faults{},
		Logger:     o.Logger,
		Registerer: o.Registerer,
	}
	if o.Flush == FlushSync {
		cfg.Store.Flush = store.FlushSync
	}
	for _, t := range o.Topics {
		typ, err := t.Type.internal()
		if err != nil {
			return cfg, err
		}
		cfg.Topics = append(cfg.Topics, broker.Topic{Name: t.Name, Queues: t.Queues, Type: typ, BatchCQ: t.BatchCQ})
	}
	for _, g := range o.Groups {
		cfg.Groups = append(cfg.Groups, broker.Group{Name: g.Name, MaxDeliveryAttempts: g.MaxDeliveryAttempts, FIFO: g.FIFO, RetryBackoff: g.RetryBackoff})
	}
	o.security(&cfg)
	return cfg, nil
}

// Start brings up the clusters: every broker listens on 127.0.0.1 on a port
// of its own, with its own store, and knows the other brokers of its
// cluster. On error, whatever started is stopped again.
func Start(ctx context.Context, opts Options) (*Env, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	env := &Env{dir: opts.Dir}
	if env.dir == "" {
		d, err := os.MkdirTemp("", "twinmq-embedded-")
		if err != nil {
			return nil, fmt.Errorf("embedded: temp dir: %w", err)
		}
		env.dir, env.tempDir = d, true
	}
	fail := func(err error) (*Env, error) {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return nil, errors.Join(err, env.Close(closeCtx))
	}
	ns, err := broker.StartNameServerTLS("127.0.0.1:0", env.runningBrokers, opts.TLS)
	if err != nil {
		return fail(fmt.Errorf("embedded: %w", err))
	}
	env.nameServer = ns
	for _, cname := range opts.ClusterNames {
		c := &Cluster{Name: cname}
		env.clusters = append(env.clusters, c)
		for j := 0; j < opts.BrokersPerCluster; j++ {
			name := fmt.Sprintf("%s-broker-%d", cname, j)
			cfg, err := opts.brokerConfig(cname, name, filepath.Join(env.dir, cname, name))
			if err != nil {
				return fail(err)
			}
			b := &Broker{cluster: c, cfg: cfg, faults: cfg.Faults}
			if err := b.start(ctx); err != nil {
				return fail(err)
			}
			c.brokers = append(c.brokers, b)
		}
		if err := c.linkPeers(); err != nil {
			return fail(err)
		}
	}
	return env, nil
}

// linkPeers tells every broker of the cluster about the others.
func (c *Cluster) linkPeers() error {
	peers := make([]broker.Peer, len(c.brokers))
	for i, b := range c.brokers {
		peers[i] = broker.Peer{Name: b.cfg.Name, Endpoint: b.Endpoint()}
	}
	for _, b := range c.brokers {
		if err := b.setPeers(peers); err != nil {
			return err
		}
	}
	return nil
}

// Close stops every broker and, for a temporary Dir, removes the data.
func (e *Env) Close(ctx context.Context) error {
	var errs []error
	if e.nameServer != nil {
		errs = append(errs, e.nameServer.Close())
	}
	for _, c := range e.clusters {
		for _, b := range c.brokers {
			errs = append(errs, b.Stop(ctx))
		}
	}
	if e.tempDir {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}

// DLQTopic returns the name of a consumer group's dead-letter topic.
func DLQTopic(group string) string { return broker.DLQTopic(group) }
