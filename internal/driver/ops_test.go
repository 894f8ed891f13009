package driver

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// TestMatchAckResults: results are paired with entries by receipt handle,
// whatever their order; an entry without a result counts as acked.
func TestMatchAckResults(t *testing.T) {
	entries := []AckEntry{{ReceiptHandle: "h1"}, {ReceiptHandle: "h2"}, {ReceiptHandle: "h3"}}
	res := func(h string, c rmqpb.Code) *rmqpb.AckMessageResultEntry {
		return &rmqpb.AckMessageResultEntry{ReceiptHandle: h, Status: &rmqpb.Status{Code: c}}
	}
	inOrder := matchAckResults(entries, []*rmqpb.AckMessageResultEntry{
		res("h1", rmqpb.Code_OK), res("h2", rmqpb.Code_INVALID_RECEIPT_HANDLE), res("h3", rmqpb.Code_OK)}, "h:1")
	assert.NoError(t, inOrder[0])
	assert.ErrorIs(t, inOrder[1], ErrBadRequest)
	assert.NoError(t, inOrder[2])

	reordered := matchAckResults(entries, []*rmqpb.AckMessageResultEntry{
		res("h3", rmqpb.Code_OK), res("h2", rmqpb.Code_INVALID_RECEIPT_HANDLE), res("h1", rmqpb.Code_OK)}, "h:1")
	assert.NoError(t, reordered[0])
	assert.ErrorIs(t, reordered[1], ErrBadRequest)
	assert.NoError(t, reordered[2])

	partial := matchAckResults(entries, []*rmqpb.AckMessageResultEntry{res("h2", rmqpb.Code_INVALID_RECEIPT_HANDLE)}, "h:1")
	assert.NoError(t, partial[0])
	assert.ErrorIs(t, partial[1], ErrBadRequest)
	assert.NoError(t, partial[2])
}
