package remoting

import (
	"testing"

	"github.com/twinmq/twinmq/internal/leakcheck"
)

// TestMain fails the run when a goroutine started by the tests outlives them.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
