package broker

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store"
)

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("broker: invalid config")

// MessageType is the kind of messages a topic accepts, as the topic attribute
// `message.type` of RocketMQ 5.
type MessageType int

const (
	// TypeNormal accepts messages with no message group, no delivery time and
	// no transaction. It is the default (zero value).
	TypeNormal MessageType = iota
	// TypeFIFO accepts messages with a message group.
	TypeFIFO
	// TypeDelay accepts messages with a delivery time.
	TypeDelay
	// TypeTransaction accepts transactional messages.
	TypeTransaction
	// TypeMixed accepts every kind.
	TypeMixed
)

func (t MessageType) String() string {
	switch t {
	case TypeNormal:
		return "NORMAL"
	case TypeFIFO:
		return "FIFO"
	case TypeDelay:
		return "DELAY"
	case TypeTransaction:
		return "TRANSACTION"
	case TypeMixed:
		return "MIXED"
	}
	return fmt.Sprintf("MessageType(%d)", int(t))
}

// ParseMessageType parses the names String returns (case-sensitive), as found
// in a configuration file. The empty string is TypeNormal.
func ParseMessageType(s string) (MessageType, error) {
	switch s {
	case "", "NORMAL":
		return TypeNormal, nil
	case "FIFO":
		return TypeFIFO, nil
	case "DELAY":
		return TypeDelay, nil
	case "TRANSACTION":
		return TypeTransaction, nil
	case "MIXED":
		return TypeMixed, nil
	}
	return 0, fmt.Errorf("%w: unknown message type %q (want NORMAL, FIFO, DELAY, TRANSACTION or MIXED)", ErrInvalidConfig, s)
}

// accepts reports whether a topic of type t takes a message of kind k.
func (t MessageType) accepts(k MessageType) bool {
	return t == TypeMixed || t == k
}

// Topic declares a topic served by the broker.
type Topic struct {
	Name string
	// Queues is the number of queues of the topic on this broker (default 8).
	Queues int
	Type   MessageType
	// BatchCQ stores one consume-queue entry per batch (see the store).
	BatchCQ bool
}

// Group declares a consumer group.
type Group struct {
	Name string
	// MaxDeliveryAttempts is how many times a message is delivered before it
	// goes to the dead-letter topic %DLQ%<group> (default 17: the first
	// delivery and RocketMQ's 16 retries).
	MaxDeliveryAttempts int
	// FIFO makes the group consume orderly: a queue delivers nothing past a
	// message still in flight.
	FIFO bool
	// RetryBackoff is the retry policy pushed to the group's consumers in
	// the Telemetry settings echo (customized backoff: the delay before
	// delivery attempt i+2 is RetryBackoff[min(i, len-1)]). Empty means
	// RocketMQ's default 1s 5s 10s 30s 1m 2m ... 2h.
	RetryBackoff []time.Duration
}

// Peer is another broker of the same cluster, listed in QueryRoute answers.
// Peers are assumed to serve the same topics with the same queue counts.
type Peer struct {
	Name     string
	Endpoint string // host:port
}

// Limits are the protocol limits, named after the proxy settings they mirror.
// A zero field takes the proxy's default, given in brackets.
type Limits struct {
	MaxBodySize          int           // maxMessageSize [4 MiB]
	MaxUserProperties    int           // userPropertyMaxNum [128]
	MaxPropertiesSize    int           // maxUserPropertySize [16 KiB]
	MaxMessageGroupSize  int           // maxMessageGroupSize [64]
	MaxDelay             time.Duration // maxDelayTimeMills [24 h]
	MaxRecoveryDuration  time.Duration // maxTransactionRecoverySecond [1 h]
	MinInvisible         time.Duration // minInvisibleTimeMillsForRecv [10 s]; tests may lower it
	MaxInvisible         time.Duration // maxInvisibleTimeMills [12 h]
	AutoRenewSlice       time.Duration // renewSliceTimeMillis [60 s]
	AutoRenewAhead       time.Duration // renewAheadTimeMillis [10 s]
	AutoRenewMax         time.Duration // renewMaxTimeMillis [3 h]
	MinLongPolling       time.Duration // grpcClientConsumerMinLongPollingTimeoutMillis [5 s]; tests may lower it
	MaxLongPolling       time.Duration // grpcClientConsumerMaxLongPollingTimeoutMillis [20 s]
	MaxBatchSize         int           // MAX_MSG_NUMS_FOR_POP_REQUEST [32]
	ClientIdle           time.Duration // grpcClientIdleTimeMills [120 s]
	DefaultMaxDeliveries int           // retryMaxTimes+1 [17]
}

func (l *Limits) fill() {
	def := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	defi := func(p *int, d int) {
		if *p <= 0 {
			*p = d
		}
	}
	defi(&l.MaxBodySize, 4<<20)
	defi(&l.MaxUserProperties, 128)
	defi(&l.MaxPropertiesSize, 16<<10)
	defi(&l.MaxMessageGroupSize, 64)
	def(&l.MaxDelay, 24*time.Hour)
	def(&l.MaxRecoveryDuration, time.Hour)
	def(&l.MinInvisible, 10*time.Second)
	def(&l.MaxInvisible, 12*time.Hour)
	def(&l.AutoRenewSlice, 60*time.Second)
	def(&l.AutoRenewAhead, 10*time.Second)
	def(&l.AutoRenewMax, 3*time.Hour)
	def(&l.MinLongPolling, 5*time.Second)
	def(&l.MaxLongPolling, 20*time.Second)
	defi(&l.MaxBatchSize, 32)
	def(&l.ClientIdle, 120*time.Second)
	defi(&l.DefaultMaxDeliveries, 17)
}

// Config configures one broker. It is validated once by New.
type Config struct {
	// Cluster is the name of the cluster the broker belongs to.
	Cluster string
	// Name is the broker name, unique in the cluster; it is written into
	// receipt handles and QueryRoute answers.
	Name string
	// Listen is the gRPC listen address (default 127.0.0.1:0).
	Listen string
	// Advertise is the "host:port" QueryRoute names for this broker
	// (default: the address it listens on). Set it when clients reach the
	// broker through something in between, a proxy or a NAT, so that the
	// routes send them the same way.
	Advertise string
	// RemotingListen, when set, is the address the broker also serves
	// RocketMQ's classic remoting protocol on (send and batch send, see
	// remoting.go), from the same store. Empty: no remoting listener.
	RemotingListen string
	// DataDir holds the store (DataDir/store) and the consumer progress
	// (DataDir/progress). Required.
	DataDir string
	Topics  []Topic
	Groups  []Group
	// StrictGroups answers CONSUMER_GROUP_NOT_FOUND for a group missing from
	// Groups. By default such a group is created with default settings, as a
	// RocketMQ broker does with autoCreateSubscriptionGroup.
	StrictGroups bool
	// Peers are the other brokers of the cluster (see also SetPeers).
	Peers  []Peer
	Limits Limits
	// Store tunes the storage core. Dir, Logger are set by the broker.
	Store store.Options
	// CheckpointInterval is how often consumer progress is written when it
	// changed (default 1 s). Progress is also written on Close.
	CheckpointInterval time.Duration
	// Timer tunes the timer store of delayed messages (DataDir/timer).
	Timer TimerOptions
	// Transactions tunes the check-back of orphaned transactions.
	Transactions TransactionOptions
	// Security sets TLS and access control (default: plaintext, open).
	Security Security
	// Faults, when set, injects failures into every RPC (see Faults). It may
	// be shared by successive brokers on the same data dir.
	Faults *Faults
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Registerer receives the broker's metrics; nil means no metrics.
	Registerer prometheus.Registerer
}

// normalize fills defaults and checks the config. It works on a copy owned
// by the broker.
func (c *Config) normalize() error {
	if c.Name == "" {
		return fmt.Errorf("%w: broker Name is required", ErrInvalidConfig)
	}
	if c.Cluster == "" {
		c.Cluster = "DefaultCluster"
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: broker %s: DataDir is required", ErrInvalidConfig, c.Name)
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%w: broker %s: Listen %q: %w", ErrInvalidConfig, c.Name, c.Listen, err)
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	c.Limits.fill()
	topics := make([]Topic, len(c.Topics))
	seen := map[string]bool{}
	for i, t := range c.Topics {
		if err := checkTopicName(t.Name); err != nil {
			return fmt.Errorf("%w: topic %q: %w", ErrInvalidConfig, t.Name, err)
		}
		if seen[t.Name] {
			return fmt.Errorf("%w: topic %q declared twice", ErrInvalidConfig, t.Name)
		}
		seen[t.Name] = true
		if t.Queues == 0 {
			t.Queues = 8
		}
		if t.Queues < 0 || t.Queues > 1024 {
			return fmt.Errorf("%w: topic %q: %d queues (want 1..1024)", ErrInvalidConfig, t.Name, t.Queues)
		}
		if t.Type < TypeNormal || t.Type > TypeMixed {
			return fmt.Errorf("%w: topic %q: unknown type %v", ErrInvalidConfig, t.Name, t.Type)
		}
		topics[i] = t
	}
	c.Topics = topics
	groups := make([]Group, len(c.Groups))
	seenG := map[string]bool{}
	for i, g := range c.Groups {
		if err := checkGroupName(g.Name); err != nil {
			return fmt.Errorf("%w: group %q: %w", ErrInvalidConfig, g.Name, err)
		}
		if seenG[g.Name] {
			return fmt.Errorf("%w: group %q declared twice", ErrInvalidConfig, g.Name)
		}
		seenG[g.Name] = true
		if g.MaxDeliveryAttempts == 0 {
			g.MaxDeliveryAttempts = c.Limits.DefaultMaxDeliveries
		}
		for _, d := range g.RetryBackoff {
			if d < 0 {
				return fmt.Errorf("%w: group %q: negative RetryBackoff", ErrInvalidConfig, g.Name)
			}
		}
		g.RetryBackoff = append([]time.Duration(nil), g.RetryBackoff...)
		if g.MaxDeliveryAttempts < 1 {
			return fmt.Errorf("%w: group %q: MaxDeliveryAttempts %d (want >= 1)", ErrInvalidConfig, g.Name, g.MaxDeliveryAttempts)
		}
		groups[i] = g
	}
	c.Groups = groups
	peers := make([]Peer, 0, len(c.Peers))
	for _, p := range c.Peers {
		if err := checkPeer(p); err != nil {
			return err
		}
		if p.Name != c.Name {
			peers = append(peers, p)
		}
	}
	c.Peers = peers
	if c.Advertise != "" {
		if _, _, err := splitEndpoint(c.Advertise); err != nil {
			return fmt.Errorf("%w: Advertise: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

func checkPeer(p Peer) error {
	if p.Name == "" {
		return fmt.Errorf("%w: peer with endpoint %q has no name", ErrInvalidConfig, p.Endpoint)
	}
	if _, _, err := splitEndpoint(p.Endpoint); err != nil {
		return fmt.Errorf("%w: peer %s: %w", ErrInvalidConfig, p.Name, err)
	}
	return nil
}
