package driver

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// A server that answers a transactional send with success but no
// transaction id gives a result nobody can end (EndTransaction refuses an
// empty id). The driver reports that message's result as malformed (a
// typed, non-retryable error: the half message is stored), not as a
// success.
func TestTransactionalSuccessWithoutTransactionID(t *testing.T) {
	f := startFake(t, func(f *fakeServer) {
		f.onSend = func(req *rmqpb.SendMessageRequest) *rmqpb.SendMessageResponse {
			return &rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: ok(),
				MessageId: req.GetMessages()[0].GetSystemProperties().GetMessageId(), Offset: 3}}}
		}
	})
	c := newTestClient(t, producerConfig())
	res, err := c.Send(ctxT(t), f.addr, []*Message{{Topic: "orders", Body: []byte("x"), Transactional: true}})
	require.NoError(t, err, "the request itself was answered")
	require.Len(t, res, 1)
	require.ErrorIs(t, res[0].Err, ErrInternal, "transactional send succeeded with TransactionID %q", res[0].TransactionID)
	require.False(t, Retryable(res[0].Err), "the half message is stored: resending would store it twice")
}
