package lane_test

import (
	"testing"
	"time"

	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/lane/lanetest"
)

func TestMemoryRegistryConformance(t *testing.T) {
	lanetest.Run(t, lanetest.Harness{
		New: func(t *testing.T) lane.Registry {
			r := lane.NewMemoryRegistry(lane.MemoryOptions{})
			t.Cleanup(func() { _ = r.Close() })
			return r
		},
		TTL:   300 * time.Millisecond,
		Slack: 100 * time.Millisecond,
	})
}
