package broker

import (
	"context"
	"errors"
	"strings"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/broker/txn"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// EndTransaction commits or rolls back a half message. A resolution other
// than COMMIT or ROLLBACK changes nothing (the proxy forwards it as "not a
// type"; the Go client sends it for UNKNOWN): the orphan check asks again.
// Ending a transaction that is already resolved answers OK, so a client
// that retries is not told off; an id that names no half message of this
// broker is INVALID_TRANSACTION_ID (the proxy answers INTERNAL_SERVER_ERROR
// "cannot found transaction data").
func (s *service) EndTransaction(ctx context.Context, req *rmqpb.EndTransactionRequest) (*rmqpb.EndTransactionResponse, error) {
	b := s.b
	if strings.TrimSpace(req.GetTransactionId()) == "" {
		return &rmqpb.EndTransactionResponse{Status: &rmqpb.Status{Code: rmqpb.Code_INVALID_TRANSACTION_ID, Message: "transaction id is empty"}}, nil
	}
	if _, err := b.knownTopic(req.GetTopic()); err != nil {
		return &rmqpb.EndTransactionResponse{Status: toStatus(err)}, nil
	}
	r := txn.Unknown
	switch req.GetResolution() {
	case rmqpb.TransactionResolution_COMMIT:
		r = txn.Commit
	case rmqpb.TransactionResolution_ROLLBACK:
		r = txn.Rollback
	}
	err := b.txn.End(ctx, req.GetTransactionId(), req.GetMessageId(), req.GetTopic().GetName(), r)
	switch {
	case err == nil:
	case errors.Is(err, txn.ErrResolved):
		b.log.Debug("transaction already resolved", zap.String("transaction_id", req.GetTransactionId()))
	case errors.Is(err, txn.ErrInvalidTransactionID):
		return &rmqpb.EndTransactionResponse{Status: &rmqpb.Status{Code: rmqpb.Code_INVALID_TRANSACTION_ID, Message: err.Error()}}, nil
	default:
		return &rmqpb.EndTransactionResponse{Status: toStatus(err)}, nil
	}
	b.log.Debug("transaction ended", zap.String("transaction_id", req.GetTransactionId()),
		zap.String("resolution", r.String()), zap.String("source", req.GetSource().String()))
	return &rmqpb.EndTransactionResponse{Status: okStatus()}, nil
}
