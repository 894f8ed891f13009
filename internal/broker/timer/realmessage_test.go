package timer

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store"
)

// A REAL_QID outside int32 is a corrupt timer message: it used to be
// parsed as an int and truncated, so 4294967296 was delivered to queue 0.
func TestRealMessageRejectsQueueIDOverflow(t *testing.T) {
	for _, qid := range []string{"4294967296", "2147483648", "-1", "x"} {
		m := store.Message{Topic: SystemTopic, Properties: map[string]string{PropRealTopic: "orders", PropRealQueue: qid}}
		_, err := realMessage(m)
		require.ErrorIs(t, err, ErrInvalidMessage, "REAL_QID %s", qid)
	}
	m := store.Message{Topic: SystemTopic, Properties: map[string]string{PropRealTopic: "orders", PropRealQueue: "2147483647"}}
	got, err := realMessage(m)
	require.NoError(t, err)
	require.Equal(t, int32(2147483647), got.QueueID)
	require.Equal(t, "orders", got.Topic)
}
