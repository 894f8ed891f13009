package embedded

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Options printed with %v (in a log line, a test failure) name their enums.
func TestEnumsPrintTheirNames(t *testing.T) {
	for v, want := range map[MessageType]string{
		Normal: "Normal", FIFO: "FIFO", Delay: "Delay", Transaction: "Transaction", Mixed: "Mixed",
		MessageType(9): "MessageType(9)",
	} {
		assert.Equal(t, want, v.String())
	}
	for v, want := range map[FlushMode]string{FlushAsync: "FlushAsync", FlushSync: "FlushSync", FlushMode(-1): "FlushMode(-1)"} {
		assert.Equal(t, want, v.String())
	}
	assert.Equal(t, "{orders 0 FIFO false}", fmt.Sprintf("%v", Topic{Name: "orders", Type: FIFO}))
}
