package producer

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSendInTransaction: the local function's result decides: commit is
// consumed, rollback and a failed local transaction are not, unknown stays
// pending (invisible).
func TestSendInTransaction(t *testing.T) {
	env := startEnv(t, "ledger")
	p := newProducer(t, WithConfig(docFor(env, "ledger")))
	ctx := testCtx(t)
	run := func(body string, res TransactionResolution, lerr error) (*SendResult, TransactionResolution, error) {
		ran := false
		r, applied, err := p.SendInTransaction(ctx, &Message{Topic: "ledger", Body: []byte(body)}, func(context.Context) (TransactionResolution, error) {
			ran = true
			return res, lerr
		})
		require.True(t, ran)
		return r, applied, err
	}
	committed, applied, err := run("commit", TransactionCommit, nil)
	require.NoError(t, err)
	require.Equal(t, TransactionCommit, applied)
	_, applied, err = run("rollback", TransactionRollback, nil)
	require.NoError(t, err)
	require.Equal(t, TransactionRollback, applied)
	boom := errors.New("local failure")
	_, applied, err = run("failed", TransactionCommit, boom)
	require.ErrorIs(t, err, boom)
	require.Equal(t, TransactionRollback, applied)
	_, applied, err = run("unknown", TransactionUnknown, nil)
	require.NoError(t, err)
	require.Equal(t, TransactionUnknown, applied)

	got := drain(t, env, "ledger")
	require.Len(t, got, 1)
	require.Equal(t, "commit", string(got[committed.MessageID].Body))

	_, _, err = p.SendInTransaction(ctx, &Message{Topic: "ledger", Body: []byte("x")}, nil)
	require.ErrorIs(t, err, ErrInvalidMessage)
}
