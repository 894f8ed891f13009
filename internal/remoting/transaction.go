package remoting

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// Resolution ends a transaction.
type Resolution int

const (
	// Unknown leaves the half message to the broker's check-back.
	Unknown Resolution = iota
	Commit
	Rollback
)

// commitOrRollback is END_TRANSACTION's value of a resolution
// (MessageSysFlag: not a type 0, commit 8, rollback 12).
func (r Resolution) commitOrRollback() string {
	switch r {
	case Commit:
		return strconv.Itoa(int(wire.SysTransactionCommit))
	case Rollback:
		return strconv.Itoa(int(wire.SysTransactionRollbck))
	}
	return "0"
}

// EndTransaction names a half message to resolve.
type EndTransaction struct {
	Addr          string // the broker that stored the half message
	ProducerGroup string
	Topic         string
	MessageID     string
	TransactionID string
	QueueOffset   int64 // the half message's offset (tranStateTableOffset)
	CommitLogOff  int64
	Resolution    Resolution
	// FromCheck says the resolution answers a check-back.
	FromCheck bool
}

// EndTransaction sends END_TRANSACTION, oneway as RocketMQ's clients do:
// the broker answers nothing, and a resolution lost on the way is asked
// for again by the broker's check-back.
func (c *Client) EndTransaction(ctx context.Context, e EndTransaction) error {
	if e.TransactionID == "" {
		return fmt.Errorf("%w: no transaction id", ErrInvalidMessage)
	}
	h := &wire.Header{Code: wire.CodeEndTransaction, Ext: map[string]string{
		"producerGroup":        e.ProducerGroup,
		"tranStateTableOffset": strconv.FormatInt(e.QueueOffset, 10),
		"commitLogOffset":      strconv.FormatInt(e.CommitLogOff, 10),
		"commitOrRollback":     e.Resolution.commitOrRollback(),
		"fromTransactionCheck": strconv.FormatBool(e.FromCheck),
		"msgId":                e.MessageID,
		"transactionId":        e.TransactionID,
		"topic":                e.Topic,
	}}
	return c.InvokeOneway(ctx, e.Addr, h, nil)
}

// TransactionCheck is a broker's CHECK_TRANSACTION_STATE: resolve this
// half message with EndTransaction (FromCheck true).
type TransactionCheck struct {
	Addr          string
	TransactionID string
	MessageID     string // the half message's UNIQ_KEY
	QueueOffset   int64
	CommitLogOff  int64
	Message       wire.MessageExt
}

// ParseTransactionCheck reads a CHECK_TRANSACTION_STATE request a broker at
// addr sent (see WithHandler).
func ParseTransactionCheck(addr string, req *wire.Command) (*TransactionCheck, error) {
	if req.Code != wire.CodeCheckTransactionState {
		return nil, fmt.Errorf("remoting %s: request code %d is not a transaction check: %w", addr, req.Code, rmqerr.ErrBadRequest)
	}
	msgs, err := wire.DecodeMessageExts(req.Body)
	if err != nil {
		return nil, fmt.Errorf("remoting %s: transaction check: %w", addr, err)
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("remoting %s: transaction check carries %d messages: %w", addr, len(msgs), wire.ErrMalformed)
	}
	tc := &TransactionCheck{Addr: addr, TransactionID: req.Ext["transactionId"], Message: msgs[0]}
	tc.MessageID = msgs[0].Properties[wire.PropUniqKey]
	if tc.MessageID == "" {
		tc.MessageID = req.Ext["msgId"]
	}
	tc.QueueOffset, _ = strconv.ParseInt(req.Ext["tranStateTableOffset"], 10, 64)
	tc.CommitLogOff, _ = strconv.ParseInt(req.Ext["commitLogOffset"], 10, 64)
	if tc.TransactionID == "" {
		return nil, fmt.Errorf("remoting %s: transaction check without a transaction id: %w", addr, wire.ErrMalformed)
	}
	return tc, nil
}
