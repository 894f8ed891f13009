package txn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store"
)

// System topics of transactions, RocketMQ's names.
const (
	HalfTopic     = "RMQ_SYS_TRANS_HALF_TOPIC"
	OpTopic       = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
	CheckMaxTopic = "TRANS_CHECK_MAX_TIME_TOPIC"
)

// systemTopic reports whether topic is one of the package's own.
func systemTopic(topic string) bool {
	return topic == HalfTopic || topic == OpTopic || topic == CheckMaxTopic
}

// Property keys the package reads or writes.
const (
	PropRealTopic     = "REAL_TOPIC"
	PropRealQueue     = "REAL_QID"
	PropCheckTimes    = "TRANSACTION_CHECK_TIMES"
	PropProducerGroup = "PGROUP"
	PropRecovery      = "CHECK_IMMUNITY_TIME_IN_SECONDS"
	PropUniqKey       = "UNIQ_KEY"
	propOp            = "TXN_OP"
	propNonce         = "TXN_NONCE"
	propOpChecks      = "TXN_CHECKS"
	opTag             = "d"
)

// Message flags, with the values of RocketMQ's sysFlag (the broker uses the
// same bits).
const (
	FlagPrepared uint32 = 0x4
	FlagCommit   uint32 = 0x8
)

// Defaults of Options.
const (
	DefaultTimeout       = 6 * time.Second
	DefaultCheckInterval = 30 * time.Second
	DefaultMaxChecks     = 15
)

// Resolution is a producer's answer for a transaction.
type Resolution int

const (
	// Unknown changes nothing: the transaction stays pending and is
	// checked back later.
	Unknown Resolution = iota
	Commit
	Rollback
)

func (r Resolution) String() string {
	switch r {
	case Commit:
		return "commit"
	case Rollback:
		return "rollback"
	}
	return "unknown"
}

// Errors of the package. Errors wrap one of these or a store error.
var (
	ErrInvalidOptions = errors.New("txn: invalid options")
	// ErrInvalidTransactionID: the id is malformed, names no half message,
	// or does not match the message id or topic given with it.
	ErrInvalidTransactionID = errors.New("txn: invalid transaction id")
	// ErrResolved: the transaction was already committed, rolled back or
	// discarded; nothing changed.
	ErrResolved = errors.New("txn: transaction already resolved")
	// ErrInvalidResolution: End got a Resolution other than Unknown,
	// Commit and Rollback.
	ErrInvalidResolution = errors.New("txn: invalid resolution")
	// ErrInvalidMessage: a half message without a destination.
	ErrInvalidMessage = errors.New("txn: invalid message")
	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("txn: closed")
)

// Deliverer puts a committed message into its real topic (msg.Topic,
// msg.QueueID).
type Deliverer interface {
	Deliver(ctx context.Context, msg store.Message) error
}

// Checker asks a live producer of the transaction's topic to resolve an
// orphan. msg is the half message as it will be delivered (real topic and
// queue); group is its producer group (PGROUP, the topic name for gRPC
// producers). An error means the check could not be sent; it still counts.
type Checker interface {
	CheckBack(ctx context.Context, group string, msg store.StoredMessage, transactionID string) error
}

// CheckerFunc adapts a function to Checker.
type CheckerFunc func(ctx context.Context, group string, msg store.StoredMessage, transactionID string) error

// CheckBack calls f.
func (f CheckerFunc) CheckBack(ctx context.Context, group string, msg store.StoredMessage, transactionID string) error {
	return f(ctx, group, msg, transactionID)
}

// Options configure a Manager.
type Options struct {
	// Store holds the system topics. Required; not closed by the manager.
	Store *store.Store
	// Deliverer receives committed messages. Required.
	Deliverer Deliverer
	// Checker sends check-backs. Nil: orphans are only counted down to
	// their discard.
	Checker Checker
	// Timeout: a half message becomes an orphan this long after it was
	// stored, unless its own recovery duration is longer (default 6 s).
	Timeout time.Duration
	// CheckInterval is the time between two check-backs of one orphan
	// (default 30 s).
	CheckInterval time.Duration
	// MaxChecks is how many check-backs an orphan gets before it is moved to
	// CheckMaxTopic (default 15).
	MaxChecks int
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.Store == nil || o.Deliverer == nil {
		return o, fmt.Errorf("%w: Store and Deliverer are required", ErrInvalidOptions)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.MaxChecks == 0 {
		o.MaxChecks = DefaultMaxChecks
	}
	if o.Timeout < 0 || o.CheckInterval < time.Millisecond || o.MaxChecks < 1 {
		return o, fmt.Errorf("%w: Timeout %s, CheckInterval %s, MaxChecks %d", ErrInvalidOptions, o.Timeout, o.CheckInterval, o.MaxChecks)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}
