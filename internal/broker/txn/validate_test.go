package txn

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A Resolution other than Unknown, Commit and Rollback is bad input: End
// refuses it with a typed error and leaves the transaction pending. It used
// to write an op "unknown" that a rebuild reads as final, so the half
// message was silently dropped: never delivered, never checked back.
func TestEndRejectsUnknownResolution(t *testing.T) {
	dir := t.TempDir()
	e := openEnv(t, dir, nil, nil)
	p, err := e.m.Prepare(testCtx(t), txMsg("m1", "orders", 0))
	require.NoError(t, err)
	err = e.m.End(testCtx(t), p.TransactionID, "m1", "orders", Resolution(7))
	require.ErrorIs(t, err, ErrInvalidResolution, "End accepted resolution 7")
	require.Equal(t, 1, e.m.Pending(), "the transaction must stay pending")
}

// The manager refuses its own system topics as a destination
// (ErrInvalidMessage), as the timer does: a committed message addressed to
// the half topic used to become a phantom half message after a restart.
func TestPrepareRejectsSystemTopics(t *testing.T) {
	dir := t.TempDir()
	e := openEnv(t, dir, nil, nil)
	for _, topic := range []string{HalfTopic, OpTopic, CheckMaxTopic} {
		_, err := e.m.Prepare(testCtx(t), txMsg("m1", topic, 0))
		require.ErrorIs(t, err, ErrInvalidMessage, topic)
	}
}
