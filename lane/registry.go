package lane

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors of a Registry. Implementations wrap them with detail.
var (
	// ErrInvalidInstance: an Instance or TTL given to Register is unusable.
	ErrInvalidInstance = errors.New("lane: invalid instance")
	// ErrLeaseExpired: the lease ran out, was released, or was replaced by a
	// newer registration of the same instance. Register again.
	ErrLeaseExpired = errors.New("lane: lease expired")
	// ErrRegistryClosed: the registry was closed.
	ErrRegistryClosed = errors.New("lane: registry closed")
)

// Instance is one live consumer of a group in a lane.
type Instance struct {
	// Group is the consumer group.
	Group string
	// Lane is the lane this instance handles; "" is base.
	Lane string
	// ID identifies the instance within its group; a second registration
	// with the same group and ID replaces the first.
	ID string
	// Addr is where the instance serves forwarded messages ("host:port").
	Addr string
	// Meta is free-form data for the forwarding side (version, zone, ...).
	Meta map[string]string
}

// Validate reports why the instance cannot be registered: a missing
// group, id or address, or a malformed lane. The error wraps
// ErrInvalidInstance. Every Registry checks it in Register; a registry of
// another store checks what it reads back with it too.
func (in Instance) Validate() error { return in.validate() }

func (in Instance) validate() error {
	switch {
	case in.Group == "":
		return fmt.Errorf("empty group: %w", ErrInvalidInstance)
	case in.ID == "":
		return fmt.Errorf("group %q: empty instance id: %w", in.Group, ErrInvalidInstance)
	case in.Addr == "":
		return fmt.Errorf("group %q instance %q: empty address: %w", in.Group, in.ID, ErrInvalidInstance)
	}
	if err := Validate(in.Lane); err != nil {
		return fmt.Errorf("group %q instance %q: %w (%w)", in.Group, in.ID, ErrInvalidInstance, err)
	}
	return nil
}

func (in Instance) clone() Instance {
	if in.Meta != nil {
		m := make(map[string]string, len(in.Meta))
		for k, v := range in.Meta {
			m[k] = v
		}
		in.Meta = m
	}
	return in
}

// Lease keeps an Instance registered. The holder renews it well inside its
// TTL (a third of it is the usual choice) and releases it on shutdown.
type Lease interface {
	// Instance is what the lease keeps registered.
	Instance() Instance
	// TTL is how long the registration lives without a renewal: the TTL
	// Register was given, or what the registry granted instead (a store
	// may round it up to its own unit).
	TTL() time.Duration
	// Renew extends the lease by its TTL from now. It fails with
	// ErrLeaseExpired once the lease is gone; the holder must Register again.
	Renew(ctx context.Context) error
	// Release removes the registration at once. Releasing twice, or an
	// expired lease, is not an error.
	Release(ctx context.Context) error
}

// Snapshot is the state of one group at one revision. It is immutable: do
// not modify its maps or slices.
type Snapshot struct {
	Group string
	// Revision grows with every change of the registry's membership (across
	// all groups), so a newer snapshot of a group has a larger revision. An
	// etcd implementation uses the store's revision.
	Revision int64
	// Instances by lane, each slice sorted by ID. Only lanes with at least
	// one live instance appear.
	Instances map[string][]Instance
}

// Live reports whether lane has at least one instance: a Snapshot is a
// LiveSet for Resolve and Route.
func (s Snapshot) Live(lane string) bool { return len(s.Instances[lane]) > 0 }

// Registry tracks the live consumer instances of every group and lane.
//
// Every method takes a context because a production registry talks to a
// store over the network. Errors wrap the sentinels of this package or the
// context's error.
type Registry interface {
	// Register adds inst for ttl and returns the lease that keeps it.
	Register(ctx context.Context, inst Instance, ttl time.Duration) (Lease, error)
	// Instances lists the live instances of a group's lane, sorted by ID.
	Instances(ctx context.Context, group, lane string) ([]Instance, error)
	// Lanes lists the lanes of a group that have live instances, sorted.
	Lanes(ctx context.Context, group string) ([]string, error)
	// Snapshot returns the group's current state.
	Snapshot(ctx context.Context, group string) (Snapshot, error)
	// Watch delivers the group's current snapshot at once, then a new one
	// after every change. The channel holds only the latest snapshot: a slow
	// reader skips intermediate states, never the last one, which is enough
	// because every snapshot is complete. The channel is closed when ctx ends
	// or the registry closes.
	Watch(ctx context.Context, group string) (<-chan Snapshot, error)
}
