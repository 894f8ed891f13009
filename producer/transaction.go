package producer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

// TransactionResolution is the fate of a transactional message.
type TransactionResolution int

const (
	// TransactionUnknown leaves the message pending; the broker asks again
	// later.
	TransactionUnknown TransactionResolution = iota
	// TransactionCommit makes the message visible to consumers.
	TransactionCommit
	// TransactionRollback discards it.
	TransactionRollback
)

// ErrTransactionEnded is returned by Commit or Rollback of a transaction
// that was already committed or rolled back.
var ErrTransactionEnded = errors.New("producer: transaction already ended")

// CheckedMessage is a transactional message the broker asks about because
// its sender neither committed nor rolled it back in time (the sender may
// have crashed between sending it and ending the transaction).
type CheckedMessage struct {
	// Topic is the physical topic it was stored in, on Cluster.
	Topic         string
	Cluster       string
	Endpoint      string
	MessageID     string
	TransactionID string
	Tag           string
	Keys          []string
	Properties    map[string]string
	Body          []byte
	// Lane is the lane the message was sent with ("" for base).
	Lane string
}

// TransactionChecker decides the fate of a checked message, typically by
// looking up whether the local transaction it belongs to committed. It runs
// on the producer's goroutines; ctx bounds it.
type TransactionChecker func(ctx context.Context, m *CheckedMessage) TransactionResolution

// WithTransactionChecker answers the brokers' checks of transactional
// messages left pending. Without it the checks are logged and left
// unanswered, and the brokers ask again later.
func WithTransactionChecker(fn TransactionChecker) Option {
	return func(o *options) { o.checker = fn }
}

// Transaction is a transactional ("half") message that was stored but stays
// invisible to consumers until Commit. End it with Commit or Rollback once
// the local transaction it goes with is decided; if the producer dies
// first, the broker asks the TransactionChecker of a producer of the same
// topic.
type Transaction struct {
	// Result says where the half message was stored.
	Result *SendResult

	p      *Producer
	target *brokerTarget
	ended  atomic.Bool
}

// SendTransactional sends m as a transactional message: alone, to one
// target picked like any send (retried elsewhere on failure), stored but
// invisible until the returned Transaction is committed. m may have neither
// a MessageGroup nor a DeliveryTime.
func (p *Producer) SendTransactional(ctx context.Context, m *Message) (tx *Transaction, err error) {
	if !p.enter() {
		return nil, closedError(m)
	}
	defer p.leave()
	if m != nil && (m.MessageGroup != "" || !m.DeliveryTime.IsZero()) {
		return nil, fmt.Errorf("topic %q: a transactional message can have neither a message group nor a delivery time: %w",
			m.Topic, ErrInvalidMessage)
	}
	pd, st, err := p.prepare(ctx, m)
	if err != nil {
		return nil, err
	}
	pd.transactional = true
	if done := p.sendStarts(ctx, pd); done != nil {
		defer func() {
			var r *SendResult
			if tx != nil {
				r = tx.Result
			}
			done(r, err)
		}()
	}
	ctx, cancel := withDeadline(ctx, st.sendDeadline)
	defer cancel()
	for {
		t, q, err := p.pick(ctx, pd)
		if err != nil {
			return nil, p.fail(ctx, pd, err)
		}
		r, err := p.sendAloneReserved(ctx, t, q, pd)
		if err == nil {
			res := p.succeed(pd, t, r)
			res.TransactionID = r.TransactionID
			return &Transaction{Result: res, p: p, target: t}, nil
		}
		if !p.retryable(ctx, pd, err) {
			return nil, p.fail(ctx, pd, err)
		}
	}
}

// Commit makes the message visible to consumers. It goes to the broker
// that stored the message. On an error the outcome is unknown to the
// caller; the broker will then ask the TransactionChecker.
func (tx *Transaction) Commit(ctx context.Context) error {
	return tx.end(ctx, driver.TransactionCommit)
}

// Rollback discards the message.
func (tx *Transaction) Rollback(ctx context.Context) error {
	return tx.end(ctx, driver.TransactionRollback)
}

func (tx *Transaction) end(ctx context.Context, r driver.TransactionResolution) error {
	if tx.ended.Swap(true) {
		return fmt.Errorf("message %s: %w", tx.Result.MessageID, ErrTransactionEnded)
	}
	t := tx.target
	if err := t.client.EndTransaction(ctx, t.endpoint, t.physical, tx.Result.MessageID, tx.Result.TransactionID, r); err != nil {
		switch {
		case !errors.Is(err, driver.ErrClosed):
		case tx.p.closed.Load():
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		default:
			// A reload dropped the cluster and its client was closed.
			err = fmt.Errorf("%w: the cluster left the configuration: %w", ErrUnavailable, err)
		}
		return fmt.Errorf("producer: end transaction of message %s on %s: %w", tx.Result.MessageID, t.cluster, err)
	}
	return nil
}

// orphanHandler adapts the user's checker to the driver's callback.
func (p *Producer) orphanHandler() driver.OrphanedTransactionFunc {
	fn := p.opts.checker
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, endpoint string, msg *driver.ReceivedMessage, txID string) driver.TransactionResolution {
		if msg.Err != nil {
			// The half message failed its digest (or could not be
			// decoded): no decision may rest on it. The broker asks
			// again later, with a fresh copy.
			p.log.Warn("transaction check-back of a corrupted message; answering unknown",
				zap.String("message_id", msg.ID), zap.String("transaction_id", txID), zap.String("endpoint", endpoint), zap.Error(msg.Err))
			return driver.TransactionUnknown
		}
		cm := &CheckedMessage{
			Topic: msg.Topic, Endpoint: endpoint, MessageID: msg.ID, TransactionID: txID,
			Tag: msg.Tag, Keys: msg.Keys, Properties: msg.Properties, Body: msg.Body,
			Lane:    msg.Properties[lane.PropertyLane],
			Cluster: p.clusterOf(endpoint),
		}
		switch fn(ctx, cm) {
		case TransactionCommit:
			return driver.TransactionCommit
		case TransactionRollback:
			return driver.TransactionRollback
		default:
			return driver.TransactionUnknown
		}
	}
}

// clusterOf names the cluster an endpoint belongs to in the configuration
// in force ("" when none does). It reads the pickers' snapshots, not the
// state under mu: it runs on a driver goroutine that a reload holding mu
// may be waiting for.
func (p *Producer) clusterOf(endpoint string) string {
	for _, ts := range *p.topics.Load() {
		for _, h := range ts.picker.Handles() {
			if t := h.Value(); t.endpoint == endpoint {
				return t.cluster
			}
		}
	}
	return ""
}
