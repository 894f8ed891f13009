package producer

import (
	"context"
	"errors"
	"fmt"
)

// LocalTransaction is the local part of a transaction, run by
// SendInTransaction after the half message is stored: typically a database
// transaction whose outcome decides the message's fate. Return
// TransactionCommit or TransactionRollback when the outcome is known, and
// TransactionUnknown when it is not (the broker then asks the
// TransactionChecker later). A non-nil error means the local transaction
// failed: the message is rolled back.
type LocalTransaction func(ctx context.Context) (TransactionResolution, error)

// SendInTransaction sends m as a transactional message (see
// SendTransactional), runs local, and ends the transaction with its
// result. It returns where the half message was stored and the resolution
// applied. When the send fails, local does not run. When local fails, the
// message is rolled back and the error returned wraps local's error (and
// the rollback's, if that failed too). When ending the transaction fails,
// the outcome is up to the broker's check (TransactionChecker) and the
// error says so.
func (p *Producer) SendInTransaction(ctx context.Context, m *Message, local LocalTransaction) (*SendResult, TransactionResolution, error) {
	if local == nil {
		return nil, TransactionUnknown, fmt.Errorf("SendInTransaction without a local transaction: %w", ErrInvalidMessage)
	}
	tx, err := p.SendTransactional(ctx, m)
	if err != nil {
		return nil, TransactionUnknown, err
	}
	res, lerr := local(ctx)
	if lerr != nil {
		if rerr := tx.Rollback(ctx); rerr != nil {
			return tx.Result, TransactionUnknown, errors.Join(fmt.Errorf("local transaction: %w", lerr), rerr)
		}
		return tx.Result, TransactionRollback, fmt.Errorf("local transaction: %w", lerr)
	}
	switch res {
	case TransactionCommit:
		err = tx.Commit(ctx)
	case TransactionRollback:
		err = tx.Rollback(ctx)
	default:
		return tx.Result, TransactionUnknown, nil
	}
	if err != nil {
		return tx.Result, TransactionUnknown, err
	}
	return tx.Result, res, nil
}
