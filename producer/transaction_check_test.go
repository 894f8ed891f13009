package producer

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
)

// A check-back whose half message failed its body digest reaches the
// driver's callback with Err set. The user's TransactionChecker must not
// decide on the corrupted body (CheckedMessage has no way to tell it from
// a good one): the answer is unknown, and the broker asks again. The
// producer used to drop the error and ask the checker.
func TestCorruptedCheckIsNotDecided(t *testing.T) {
	called := false
	p := newProducer(t, WithConfig(noRouteConfig()), WithTransactionChecker(func(_ context.Context, m *CheckedMessage) TransactionResolution {
		called = true
		return TransactionCommit
	}))
	h := p.orphanHandler()
	res := h(context.Background(), "127.0.0.1:1", &driver.ReceivedMessage{
		Topic: "nowhere", ID: "m1", Body: []byte("garbled body"),
		Err: fmt.Errorf("message m1: %w: MD5 digest does not match body", driver.ErrCorrupted),
	}, "0000000000000001AAAAAAAAAAAAAAAA")
	require.False(t, called, "the checker was asked to decide on a corrupted message")
	require.Equal(t, driver.TransactionUnknown, res)
}
