package driver

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// ClientType is the role a Client registers with the servers.
type ClientType int

// Client roles.
const (
	ClientTypeUnspecified ClientType = iota
	// Producer publishes to Config.Topics.
	Producer
	// PushConsumer receives for Config.Group with server-chosen batch size,
	// long polling and auto-renewed invisibility (QueryAssignment driven).
	PushConsumer
	// SimpleConsumer receives for Config.Group with explicit invisible
	// durations and acks.
	SimpleConsumer
)

func (t ClientType) String() string {
	switch t {
	case Producer:
		return "PRODUCER"
	case PushConsumer:
		return "PUSH_CONSUMER"
	case SimpleConsumer:
		return "SIMPLE_CONSUMER"
	default:
		return fmt.Sprintf("ClientType(%d)", int(t))
	}
}

func (t ClientType) pb() rmqpb.ClientType {
	switch t {
	case Producer:
		return rmqpb.ClientType_PRODUCER
	case PushConsumer:
		return rmqpb.ClientType_PUSH_CONSUMER
	case SimpleConsumer:
		return rmqpb.ClientType_SIMPLE_CONSUMER
	default:
		return rmqpb.ClientType_CLIENT_TYPE_UNSPECIFIED
	}
}

func (t ClientType) consumer() bool { return t == PushConsumer || t == SimpleConsumer }

// FilterType says how a FilterExpression is evaluated.
type FilterType int

// Filter kinds.
const (
	// FilterTag matches tags: "*" for all, or "a||b".
	FilterTag FilterType = iota
	// FilterSQL is an SQL92 expression over the message properties.
	FilterSQL
)

// Filter selects messages of a topic on the server.
type Filter struct {
	Type FilterType
	// Expression is the tag expression or the SQL text; empty means "*".
	Expression string
}

func (f Filter) pb() *rmqpb.FilterExpression {
	expr := f.Expression
	if expr == "" && f.Type == FilterTag {
		expr = "*"
	}
	t := rmqpb.FilterType_TAG
	if f.Type == FilterSQL {
		t = rmqpb.FilterType_SQL
	}
	return &rmqpb.FilterExpression{Type: t, Expression: expr}
}

// Subscription is one topic a consumer group subscribes to.
type Subscription struct {
	Topic  string
	Filter Filter
}

// Credentials sign every call with the access-key scheme of RocketMQ 5
// (HMAC-SHA1 of the x-mq-date-time header under SecretKey).
type Credentials struct {
	AccessKey string
	SecretKey string
}

// TransactionResolution is the fate of a half (transactional) message.
type TransactionResolution int

// Resolutions. TransactionUnknown sends nothing: the server asks again later.
const (
	TransactionUnknown TransactionResolution = iota
	TransactionCommit
	TransactionRollback
)

func (r TransactionResolution) pb() rmqpb.TransactionResolution {
	switch r {
	case TransactionCommit:
		return rmqpb.TransactionResolution_COMMIT
	case TransactionRollback:
		return rmqpb.TransactionResolution_ROLLBACK
	default:
		return rmqpb.TransactionResolution_TRANSACTION_RESOLUTION_UNSPECIFIED
	}
}

// OrphanedTransactionFunc decides the fate of a half message the server
// could not resolve (the producer that sent it never ended it). endpoint is
// the server that asked; msg is the half message; txID its transaction id.
type OrphanedTransactionFunc func(ctx context.Context, endpoint string, msg *ReceivedMessage, txID string) TransactionResolution

// VerifyMessageFunc consumes a message the server sent for verification
// (an operator's "consume this message directly" request) and reports the
// outcome: nil means consumed, an error means the consumer failed it. msg
// carries no receipt handle: the message is not settled afterwards. A msg
// whose Err is set (it failed its digest or could not be decoded) is
// answered MESSAGE_CORRUPTED without calling the function.
type VerifyMessageFunc func(ctx context.Context, endpoint string, msg *ReceivedMessage) error

// Defaults applied by New when a field is zero.
const (
	DefaultRequestTimeout       = 3 * time.Second
	DefaultHeartbeatInterval    = 10 * time.Second
	DefaultRouteRefreshInterval = 30 * time.Second
	DefaultReconnectBackoff     = time.Second
	DefaultLongPollingTimeout   = 20 * time.Second
	maxReconnectBackoff         = 5 * time.Second
)

// Config configures a Client. It is validated once by New; the zero values
// of the optional fields mean the documented defaults.
type Config struct {
	// Type is the role registered with every server. Required.
	Type ClientType
	// Topics are the topics a Producer publishes to (sent in Settings, so
	// that the server can ask this producer about orphaned transactions).
	Topics []string
	// Group is the consumer group; required for consumers.
	Group string
	// Subscriptions of the consumer group; at least one for consumers.
	Subscriptions []Subscription
	// Namespace is sent as x-mq-namespace and in every Resource. The
	// open-source proxy ignores it; leave empty unless a server needs it.
	Namespace string

	// RequestTimeout bounds every unary call (and is added to the long
	// polling time of receives). Default 3 s.
	RequestTimeout time.Duration
	// HeartbeatInterval between heartbeats to every endpoint in use.
	// Default 10 s.
	HeartbeatInterval time.Duration
	// RouteRefreshInterval between background refreshes of cached routes.
	// Default 30 s.
	RouteRefreshInterval time.Duration
	// ReconnectBackoff is the first wait before reopening a broken
	// Telemetry stream or connection; it grows up to 5 s (at least this
	// value). Default 1 s.
	ReconnectBackoff time.Duration
	// LongPollingTimeout is what a SimpleConsumer announces in Settings and
	// the receive default when the server pushed none. Default 20 s.
	LongPollingTimeout time.Duration

	// TLS enables TLS with this configuration; nil means plaintext.
	TLS *tls.Config
	// Credentials enable access-key signing; nil means anonymous.
	Credentials *Credentials
	// DialOptions are appended to the driver's own when dialling.
	DialOptions []grpc.DialOption

	// OnOrphanedTransaction answers the server's orphaned-transaction
	// checks (producers only). Nil leaves them unanswered.
	OnOrphanedTransaction OrphanedTransactionFunc
	// OnVerifyMessage answers the server's requests to consume a message
	// directly (consumers only; see VerifyMessageFunc). Nil answers them
	// NOT_IMPLEMENTED, as the official clients do for anything but a push
	// consumer.
	OnVerifyMessage VerifyMessageFunc

	// ClientID overrides the generated x-mq-client-id. It must be unique
	// per client instance; leave empty outside tests.
	ClientID string
	// Logger receives the driver's logs. Default zap.NewNop().
	Logger *zap.Logger
	// Registerer, when set, receives the driver's metrics, labelled with
	// Cluster and the client id; Close removes the client's series.
	Registerer prometheus.Registerer
	// Cluster names the cluster this client talks to: the "cluster" label
	// of its metrics (the driver itself does not use it).
	Cluster string
}

func (c *Config) validateAndDefault() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch c.Type {
	case Producer:
		for i, t := range c.Topics {
			if strings.TrimSpace(t) == "" {
				return bad("Topics[%d] is empty", i)
			}
		}
		if c.Group != "" || len(c.Subscriptions) > 0 {
			return bad("a producer takes Topics, not Group or Subscriptions")
		}
		if c.OnVerifyMessage != nil {
			return bad("OnVerifyMessage is for consumers")
		}
	case PushConsumer, SimpleConsumer:
		if strings.TrimSpace(c.Group) == "" {
			return bad("a consumer needs Group")
		}
		if len(c.Subscriptions) == 0 {
			return bad("a consumer needs at least one Subscription")
		}
		for i, s := range c.Subscriptions {
			if strings.TrimSpace(s.Topic) == "" {
				return bad("Subscriptions[%d].Topic is empty", i)
			}
			if s.Filter.Type != FilterTag && s.Filter.Type != FilterSQL {
				return bad("Subscriptions[%d].Filter.Type %d is unknown", i, s.Filter.Type)
			}
		}
		if len(c.Topics) > 0 {
			return bad("a consumer takes Subscriptions, not Topics")
		}
		if c.OnOrphanedTransaction != nil {
			return bad("OnOrphanedTransaction is for producers")
		}
	default:
		return bad("Type must be Producer, PushConsumer or SimpleConsumer, got %v", c.Type)
	}
	if !utf8.ValidString(c.Namespace) {
		// It is a protobuf string in every Resource.
		return bad("Namespace is not valid UTF-8")
	}
	if c.Credentials != nil && (c.Credentials.AccessKey == "" || c.Credentials.SecretKey == "") {
		return bad("Credentials need both AccessKey and SecretKey")
	}
	for name, d := range map[string]time.Duration{
		"RequestTimeout": c.RequestTimeout, "HeartbeatInterval": c.HeartbeatInterval,
		"RouteRefreshInterval": c.RouteRefreshInterval, "ReconnectBackoff": c.ReconnectBackoff,
		"LongPollingTimeout": c.LongPollingTimeout,
	} {
		if d < 0 {
			return bad("%s is negative", name)
		}
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.RouteRefreshInterval == 0 {
		c.RouteRefreshInterval = DefaultRouteRefreshInterval
	}
	if c.ReconnectBackoff == 0 {
		c.ReconnectBackoff = DefaultReconnectBackoff
	}
	if c.LongPollingTimeout == 0 {
		c.LongPollingTimeout = DefaultLongPollingTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	c.Topics = append([]string(nil), c.Topics...)
	c.Subscriptions = append([]Subscription(nil), c.Subscriptions...)
	return nil
}
