package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// TestAckBatchInterleaved: one AckMessage whose entries mix good handles,
// a handle that does not decode and a repeated handle gets one result per
// entry, in request order, and acks every message it names exactly once.
func TestAckBatchInterleaved(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-ack-batch")
	c.sendN("normal", 3)
	var got []*rmqpb.Message
	for end := time.Now().Add(5 * time.Second); len(got) < 3 && time.Now().Before(end); {
		got = append(got, c.receive("g1", "normal", 32, time.Second, 300*time.Millisecond).messages...)
	}
	require.Len(t, got, 3)
	bogus := proto.Clone(got[0]).(*rmqpb.Message)
	bogus.SystemProperties.ReceiptHandle = proto.String("garbage")

	ack := c.ack("g1", "normal", got[0], bogus, got[1], got[0], got[2])
	assert.Equal(t, rmqpb.Code_MULTIPLE_RESULTS, ack.GetStatus().GetCode())
	want := []rmqpb.Code{rmqpb.Code_OK, rmqpb.Code_INTERNAL_SERVER_ERROR, rmqpb.Code_OK, rmqpb.Code_OK, rmqpb.Code_OK}
	require.Len(t, ack.GetEntries(), len(want))
	for i, e := range ack.GetEntries() {
		assert.Equal(t, want[i], e.GetStatus().GetCode(), "entry %d", i)
	}
	assert.Equal(t, got[1].GetSystemProperties().GetReceiptHandle(), ack.GetEntries()[2].GetReceiptHandle(), "results in request order")

	// All three are done: nothing comes back after their invisible time.
	time.Sleep(time.Second)
	r := c.receive("g1", "normal", 32, time.Second, 500*time.Millisecond)
	assert.Equal(t, rmqpb.Code_MESSAGE_NOT_FOUND, r.status.GetCode())
}
