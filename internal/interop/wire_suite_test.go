//go:build interop

package interop

import (
	"testing"
	"time"

	"github.com/twinmq/twinmq/internal/wiresuite"
)

// TestWireSuiteRocketMQ runs the shared wire suite (the same cases
// TestWireSuiteEmbedded runs in `make test`) against the real proxy. Its
// topics and groups are created by interop/run.sh; the numbers below are
// the proxy's own floors, which the embedded run lowers.
func TestWireSuiteRocketMQ(t *testing.T) {
	wiresuite.Run(t, wiresuite.Backend{
		Name:           "rocketmq",
		Endpoint:       endpointFromEnv(t),
		MinInvisible:   10 * time.Second,
		MinLongPolling: 5 * time.Second,
		// The broker revives unacked pops in the background; under load
		// that runs well behind the invisible time.
		RedeliveryLag: 30 * time.Second,
	})
}
