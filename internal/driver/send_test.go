package driver

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

func batchOf(n int) ([]*Message, []string) {
	msgs := make([]*Message, n)
	ids := make([]string, n)
	for i := range msgs {
		msgs[i] = &Message{Topic: "t", Body: []byte("b"), QueueID: 2}
		ids[i] = "id" + string(rune('a'+i))
	}
	return msgs, ids
}

func TestNormalizeOneEntryPerMessage(t *testing.T) {
	msgs, ids := batchOf(3)
	resp := &rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{
		{Status: ok(), MessageId: "ida", Offset: 7},
		{Status: ok(), MessageId: "idb", Offset: 8},
		{Status: ok(), MessageId: "idc", Offset: 9, TransactionId: "tx"},
	}}
	res, err := normalizeSend(answerFromPB(resp), msgs, ids, "h:1", nil)
	require.NoError(t, err)
	require.Len(t, res, 3)
	for i, r := range res {
		assert.Equal(t, ids[i], r.MessageID)
		assert.Equal(t, int64(7+i), r.Offset)
		assert.Equal(t, int32(2), r.QueueID)
		assert.NoError(t, r.Err)
	}
	assert.Equal(t, "tx", res[2].TransactionID)

	// Into a reused slice: nothing of its earlier content shows.
	dirty := []SendResult{{MessageID: "old", TransactionID: "old-tx", RecallHandle: "h", Err: assert.AnError}, {}, {}, {}}
	again, err := normalizeSend(answerFromPB(resp), msgs, ids, "h:1", dirty)
	require.NoError(t, err)
	require.Equal(t, res, again)
	require.Same(t, &dirty[0], &again[0], "the given memory is used")
}

func TestNormalizeProxyBatchShape(t *testing.T) {
	msgs, ids := batchOf(4)
	msgs[1].QueueID = AnyQueue
	for _, proxyID := range []string{"ida,idb,idc,idd", "0A0B0C0D0E0F0000000000000000000001"} {
		resp := &rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: ok(), MessageId: proxyID, Offset: 40}}}
		res, err := normalizeSend(answerFromPB(resp), msgs, ids, "h:1", nil)
		require.NoError(t, err)
		require.Len(t, res, 4)
		for i, r := range res {
			assert.Equal(t, ids[i], r.MessageID, "client-side ids survive")
			assert.Equal(t, int64(40+i), r.Offset, "contiguous offsets")
			assert.NoError(t, r.Err)
		}
		for i, r := range res {
			// The request went to message 0's queue; message 1's own id
			// was not used by the server.
			assert.Equal(t, int32(2), r.QueueID, "result %d", i)
		}
	}
}

func TestNormalizePartialFailure(t *testing.T) {
	msgs, ids := batchOf(2)
	resp := &rmqpb.SendMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_MULTIPLE_RESULTS}, Entries: []*rmqpb.SendResultEntry{
		{Status: ok(), Offset: 1},
		{Status: &rmqpb.Status{Code: rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE, Message: "props"}},
	}}
	res, err := normalizeSend(answerFromPB(resp), msgs, ids, "h:1", nil)
	require.NoError(t, err)
	assert.NoError(t, res[0].Err)
	assert.ErrorIs(t, res[1].Err, ErrTooLarge)
}

func TestNormalizeMalformedAnswers(t *testing.T) {
	msgs, ids := batchOf(3)
	_, err := normalizeSend(answerFromPB(&rmqpb.SendMessageResponse{Status: ok()}), msgs, ids, "h:1", nil)
	assert.ErrorIs(t, err, ErrInternal)
	// The top-level status said the batch was stored: resending it on
	// another broker would store it twice.
	assert.False(t, Retryable(err), "success without entries")
	_, err = normalizeSend(answerFromPB(&rmqpb.SendMessageResponse{Status: ok(), Entries: make([]*rmqpb.SendResultEntry, 2)}), msgs, ids, "h:1", nil)
	assert.ErrorIs(t, err, ErrInternal)
	assert.False(t, Retryable(err), "success with a wrong count of entries")
	_, err = normalizeSend(answerFromPB(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: &rmqpb.Status{Code: rmqpb.Code_INTERNAL_SERVER_ERROR}}}}), msgs, ids, "h:1", nil)
	assert.ErrorIs(t, err, ErrInternal)
	assert.True(t, Retryable(err), "the batch's one entry failed: nothing was stored")
}

func FuzzNormalizeSend(f *testing.F) {
	seed := func(r *rmqpb.SendMessageResponse) []byte { b, _ := proto.Marshal(r); return b }
	f.Add(seed(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: ok(), MessageId: "a,b", Offset: 3}}}), uint8(2))
	f.Add(seed(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: ok(), Offset: 1}, {Status: ok(), Offset: 2}}}), uint8(2))
	f.Add(seed(&rmqpb.SendMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_MULTIPLE_RESULTS}}), uint8(1))
	f.Add([]byte{0xff, 0x01}, uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, n uint8) {
		var resp rmqpb.SendMessageResponse
		if proto.Unmarshal(raw, &resp) != nil {
			return
		}
		count := int(n%40) + 1
		msgs := make([]*Message, count)
		ids := make([]string, count)
		for i := range msgs {
			msgs[i] = &Message{Topic: "t", Body: []byte{1}, QueueID: int32(i) - 1}
			ids[i] = "id"
		}
		res, err := normalizeSend(answerFromPB(&resp), msgs, ids, "h:1", nil)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.class == nil {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(res) != count {
			t.Fatalf("%d results for %d messages", len(res), count)
		}
	})
}
