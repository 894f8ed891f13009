package producer

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A checker's answer printed with %v (a log line) names the resolution.
func TestTransactionResolutionPrintsItsName(t *testing.T) {
	for v, want := range map[TransactionResolution]string{
		TransactionUnknown: "TransactionUnknown", TransactionCommit: "TransactionCommit",
		TransactionRollback: "TransactionRollback", TransactionResolution(7): "TransactionResolution(7)",
	} {
		assert.Equal(t, want, v.String())
	}
}
