package embedded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/twinmq/twinmq/internal/broker"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Broker is one broker of a cluster, with fault injection. Its endpoint and
// data dir stay the same across Stop and Restart; the faults set on it
// (pause, latency, failures) too.
type Broker struct {
	cluster *Cluster
	cfg     broker.Config
	faults  *broker.Faults

	mu       sync.Mutex
	b        *broker.Broker // nil while stopped
	endpoint string
	remoting string
	peers    []broker.Peer
	version  int32 // SetRemotingVersion's, 0: the default
}

// SetRemotingVersion makes the broker's remoting answers carry version, an
// MQVersion ordinal (RocketMQ 5.0.0 is 413, 4.9.7 is 407), as the broker's
// version; it lasts across restarts. The default (and 0) is RocketMQ
// 5.4.0's, 493. Only the number changes: a test can show a remoting client
// a 4.x broker, whose lack of a timer the client must then respect.
func (b *Broker) SetRemotingVersion(version int32) {
	if version == 0 {
		version = broker.DefaultRemotingVersion
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.version = version
	if b.b != nil {
		b.b.SetRemotingVersion(version)
	}
}

func (b *Broker) start(ctx context.Context) error {
	nb, err := broker.New(b.cfg)
	if errors.Is(err, broker.ErrInvalidConfig) {
		return fmt.Errorf("embedded: %w: %w", ErrInvalidOptions, err)
	}
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if err := nb.Start(ctx); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if b.peers != nil {
		if err := nb.SetPeers(b.peers); err != nil {
			_ = nb.Close(ctx)
			return fmt.Errorf("embedded: %w", err)
		}
	}
	if b.version != 0 {
		nb.SetRemotingVersion(b.version)
	}
	b.b = nb
	b.endpoint = nb.Addr()
	b.remoting = nb.RemotingAddr()
	// A restart must come back on the same ports.
	b.cfg.Listen = b.endpoint
	b.cfg.RemotingListen = b.remoting
	return nil
}

func (b *Broker) setPeers(peers []broker.Peer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.peers = append([]broker.Peer(nil), peers...)
	if b.b != nil {
		return b.b.SetPeers(b.peers)
	}
	return nil
}

// Name returns the broker name ("<cluster>-broker-<i>").
func (b *Broker) Name() string { return b.cfg.Name }

// Cluster returns the name of the broker's cluster.
func (b *Broker) Cluster() string { return b.cluster.Name }

// Endpoint returns "127.0.0.1:port".
func (b *Broker) Endpoint() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.endpoint
}

// RemotingEndpoint returns the "127.0.0.1:port" the broker serves
// RocketMQ's classic remoting protocol on, from the same store as its gRPC
// endpoint.
func (b *Broker) RemotingEndpoint() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.remoting
}

// Running reports whether the broker serves.
func (b *Broker) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b != nil
}

// Stop shuts the broker down cleanly (consumer progress written, store
// closed); clients see the endpoint refuse connections. RPCs in progress get
// until ctx ends. Stopping a stopped broker does nothing.
func (b *Broker) Stop(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b == nil {
		return nil
	}
	err := b.b.Close(ctx)
	b.b = nil
	if err != nil {
		return fmt.Errorf("embedded: stop %s: %w", b.cfg.Name, err)
	}
	return nil
}

// Restart stops the broker if it runs and starts it again on the same
// endpoint and data dir: stored messages and consumer progress survive.
// Binding the same port is retried (until ctx ends) while the old socket
// goes away; any other failure to start, such as unreadable data, is
// returned at once, since trying again cannot mend it.
func (b *Broker) Restart(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b != nil {
		err := b.b.Close(ctx)
		b.b = nil
		if err != nil {
			return fmt.Errorf("embedded: restart %s: %w", b.cfg.Name, err)
		}
	}
	for {
		err := b.start(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("embedded: restart %s: %w", b.cfg.Name, err)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// Pause makes every RPC that starts from now on hang until Resume (or the
// caller's deadline): a broker that accepts connections but answers nothing.
func (b *Broker) Pause() { b.faults.Pause() }

// Resume releases the RPCs held by Pause.
func (b *Broker) Resume() { b.faults.Resume() }

// SetLatency adds d before every RPC; 0 removes it.
func (b *Broker) SetLatency(d time.Duration) { b.faults.SetLatency(d) }

// FailNext makes the next n RPCs fail with gRPC UNAVAILABLE.
func (b *Broker) FailNext(n int) { b.faults.FailNext(n) }

// FailNextInternal makes the next n RPCs answer with the protocol status
// INTERNAL_SERVER_ERROR (gRPC OK), as a proxy whose broker failed does.
func (b *Broker) FailNextInternal(n int) {
	b.faults.FailNextWithStatus(n, rmqpb.Code_INTERNAL_SERVER_ERROR)
}
