package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/twinmq/twinmq/internal/broker/auth"
	"github.com/twinmq/twinmq/internal/broker/timer"
	"github.com/twinmq/twinmq/internal/broker/txn"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/store"
)

// TimerOptions tune the timer store that holds delayed messages (package
// timer). Zero fields take the timer's defaults: 10 ms slots, 4096 slots,
// 3 days maximum, 2 days roll window, a checkpoint every second.
// Limits.MaxDelay (the proxy's 1 day) still bounds what SendMessage
// accepts.
type TimerOptions struct {
	Precision          time.Duration
	Slots              int
	MaxDelay           time.Duration
	RollWindow         time.Duration
	CheckpointInterval time.Duration
}

// TransactionOptions tune the orphan check-back of transactional messages
// (package txn). Zero fields take RocketMQ's defaults: first check 6 s
// after the half message, then every 30 s, 15 checks at most.
type TransactionOptions struct {
	Timeout       time.Duration
	CheckInterval time.Duration
	MaxChecks     int
}

// Security configures TLS and access control.
type Security struct {
	// TLS serves gRPC over TLS with this configuration (certificates set
	// by the caller); nil serves plaintext.
	TLS *tls.Config
	// Auth turns on access-key authentication and, unless
	// Auth.AuthenticationOnly, the ACL; nil lets every client in.
	Auth *auth.Config
}

// storeDeliverer appends due and committed messages to their real topic.
type storeDeliverer struct{ b *Broker }

// An append no fsync confirmed (store.ErrNotDurable) is a failed delivery:
// the timer or the transaction manager tries again rather than count a
// message as delivered that a power loss may take away (a copy that
// survives as well makes a duplicate, never a loss).
func (d storeDeliverer) Deliver(ctx context.Context, m store.Message) error {
	if _, err := d.b.store.Append(ctx, []store.Message{m}); err != nil {
		return err
	}
	d.b.met.messagesIn.Inc()
	return nil
}

// openHeld opens the timer store and the transaction manager over the open
// store.
func (b *Broker) openHeld(ctx context.Context) error {
	to := b.cfg.Timer
	tm, err := timer.Open(ctx, timer.Options{
		Dir:                filepath.Join(b.cfg.DataDir, "timer"),
		FS:                 b.cfg.Store.FS,
		Store:              b.store,
		Deliverer:          storeDeliverer{b},
		Precision:          to.Precision,
		Slots:              to.Slots,
		MaxDelay:           to.MaxDelay,
		RollWindow:         to.RollWindow,
		CheckpointInterval: to.CheckpointInterval,
		Logger:             b.log.Named("timer"),
	})
	if err != nil {
		return fmt.Errorf("broker %s: open timer: %w", b.cfg.Name, err)
	}
	xo := b.cfg.Transactions
	tx, err := txn.Open(ctx, txn.Options{
		Store:         b.store,
		Deliverer:     storeDeliverer{b},
		Checker:       txn.CheckerFunc(b.checkBack),
		Timeout:       xo.Timeout,
		CheckInterval: xo.CheckInterval,
		MaxChecks:     xo.MaxChecks,
		Logger:        b.log.Named("txn"),
	})
	if err != nil {
		_ = tm.Close()
		return fmt.Errorf("broker %s: open transactions: %w", b.cfg.Name, err)
	}
	b.timer, b.txn = tm, tx
	return nil
}

// closeHeld stops the timer and the transaction manager (before the store).
func (b *Broker) closeHeld() error {
	var errs []error
	if b.txn != nil {
		errs = append(errs, b.txn.Close())
	}
	if b.timer != nil {
		errs = append(errs, b.timer.Close())
	}
	return errors.Join(errs...)
}

// serverOptions are the gRPC options of Security: TLS credentials, and the
// auth interceptors, which run after fault injection and before the
// broker's own (the proxy authenticates before it looks at the client id).
func (b *Broker) serverOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if b.cfg.Security.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(b.cfg.Security.TLS)))
	}
	unary := []grpc.UnaryServerInterceptor{b.cfg.Faults.unaryInterceptor(b.stop)}
	stream := []grpc.StreamServerInterceptor{b.cfg.Faults.streamInterceptor(b.stop)}
	if b.auth != nil {
		unary = append(unary, b.auth.UnaryInterceptor())
		stream = append(stream, b.auth.StreamInterceptor())
	}
	unary = append(unary, b.unaryInterceptor)
	stream = append(stream, b.streamInterceptor)
	return append(opts, grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
}

// sendHeld stores a request the broker does not append to its topic at
// once: a transactional message (a half message, resolved later) or a
// single delayed message (the timer store).
func (b *Broker) sendHeld(ctx context.Context, t Topic, plan *sendPlan) ([]*rmqpb.SendResultEntry, error) {
	if len(plan.messages) != 1 {
		// The broker behind the proxy refuses transactional batches
		// (MESSAGE_ILLEGAL), which the proxy reports as an internal error.
		return nil, statusErr(rmqpb.Code_INTERNAL_SERVER_ERROR, "a transactional message cannot be sent in a batch")
	}
	m := plan.messages[0]
	m.QueueID = b.pickQueue(t, plan)
	entry := &rmqpb.SendResultEntry{Status: okStatus(), MessageId: m.Properties[propUniqKey]}
	var err error
	if plan.kind == TypeTransaction {
		var p txn.Prepared
		p, err = b.txn.Prepare(ctx, m)
		entry.TransactionId, entry.Offset = p.TransactionID, p.HalfOffset
	} else {
		at := time.UnixMilli(deliverAt(&store.StoredMessage{Message: m}))
		var sc timer.Scheduled
		sc, err = b.timer.Schedule(ctx, m, at)
		entry.Offset = sc.Offset
		if errors.Is(err, timer.ErrDelayTooLong) {
			return nil, statusErr(rmqpb.Code_ILLEGAL_DELIVERY_TIME, "%v", err)
		}
	}
	if err != nil && !errors.Is(err, store.ErrNotDurable) {
		return nil, err
	}
	if err != nil {
		// Stored, but the fsync a sync-flush append waits for did not
		// confirm it.
		entry.Status = toStatus(err)
	}
	b.met.messagesIn.Inc()
	return []*rmqpb.SendResultEntry{entry}, nil
}

// ErrNoProducer: a check-back found no producer of the topic with an open
// Telemetry stream.
var ErrNoProducer = errors.New("broker: no live producer for the topic")

// checkBack asks a live producer of the half message's topic to resolve it,
// with a RecoverOrphanedTransactionCommand on its Telemetry stream. The
// producer group of gRPC producers is the topic, so any client whose
// Settings publish to the topic qualifies; they are tried in turn, from a
// rotating start, until a write succeeds.
func (b *Broker) checkBack(ctx context.Context, _ string, msg store.StoredMessage, txID string) error {
	if b.rem != nil {
		if ok, err := b.rem.checkBack(&msg, txID); ok {
			return err
		}
	}
	ids := b.Producers(msg.Topic)
	if len(ids) == 0 {
		return fmt.Errorf("%w: %s", ErrNoProducer, msg.Topic)
	}
	p := popped{msg: &msg}
	m := b.toMessage(&p, "")
	sp := m.GetSystemProperties()
	sp.ReceiptHandle, sp.DeliveryAttempt, sp.QueueOffset, sp.InvisibleDuration = nil, nil, nil, nil
	cmd := &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_RecoverOrphanedTransactionCommand{
		RecoverOrphanedTransactionCommand: &rmqpb.RecoverOrphanedTransactionCommand{Message: m, TransactionId: txID},
	}}
	start := int(b.nonce.Add(1) % uint64(len(ids)))
	var errs []error
	for i := range ids {
		id := ids[(start+i)%len(ids)]
		err := b.SendCommand(ctx, id, cmd)
		if err == nil {
			b.log.Debug("transaction check-back sent", zap.String("client", id), zap.String("transaction_id", txID))
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
