package consumer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/lane"
)

// roundingRegistry grants leases in whole seconds, as an etcd-backed
// registry does (LeaseGrant takes seconds); its leases report the TTL
// granted, which lane.Lease.TTL documents as "how long the registration
// lives without a renewal".
type roundingRegistry struct {
	*lane.MemoryRegistry
	registers atomic.Int32
}

func (r *roundingRegistry) Register(ctx context.Context, inst lane.Instance, ttl time.Duration) (lane.Lease, error) {
	r.registers.Add(1)
	granted := (ttl + time.Second - 1) / time.Second * time.Second
	return r.MemoryRegistry.Register(ctx, inst, granted)
}

// With nothing changing, the lease loop renews the lease it holds, even
// when the registry granted another TTL than the one asked for. It used to
// compare the lease's TTL with the configured one and, as they differed,
// register again at every renewal (logging "lane registration differs from
// the configuration" each time, and bumping the group's revision for every
// watcher).
func TestRoundedLeaseTTLIsRenewedNotReRegistered(t *testing.T) {
	reg := &roundingRegistry{MemoryRegistry: newRegistry(t)}
	reloadableLaneConsumer(t, reg, "a", 1500*time.Millisecond)
	time.Sleep(2500 * time.Millisecond)
	require.Equal(t, int32(1), reg.registers.Load(), "registered %d times in 2.5 s with nothing changed", reg.registers.Load())
}
