package consumer

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/lane"
)

// Edges of forwarding, lane leases and retries.

// A message larger than gRPC's default 4 MiB limit still reaches the
// consumer of its lane.
func TestLargeMessageIsForwarded(t *testing.T) {
	reg := newRegistry(t)
	origin, f := laneFake(t, reg, "", func(ctx context.Context, m *Message) error {
		t.Errorf("base must not handle %s", m.ID)
		return nil
	})
	handled := make(chan string, 1)
	laneFake(t, reg, "a", func(ctx context.Context, m *Message) error {
		handled <- m.ID
		return nil
	})
	waitLanes(t, origin, "", "a")

	m := msg("big")
	m.Body = bytes.Repeat([]byte("x"), 5<<20)
	m.Properties = map[string]string{lane.PropertyLane: "a"}
	f.push(m)
	f.waitSettled(t, 1)
	f.mu.Lock()
	assert.Equal(t, []string{"big"}, f.acks, "nacks: %v", f.nacks)
	f.mu.Unlock()
	select {
	case id := <-handled:
		require.Equal(t, "big", id)
	case <-time.After(waitLong):
		t.Fatal("lane a never handled the message")
	}
}

// lanesDoc is a configuration for a consumer of lane ln with lease ttl.
func lanesDoc(ln string, ttl time.Duration) *config.Config {
	cfg := fakeDoc(config.Consumer{Lane: ln})
	cfg.Lanes.LeaseTTL = config.Duration(ttl)
	return cfg
}

// reloadableLaneConsumer starts a consumer of lane ln, registered in reg,
// whose next configurations come from the returned channel (see lanesDoc).
func reloadableLaneConsumer(t *testing.T, reg lane.Registry, ln string, ttl time.Duration) (*Consumer, chan<- config.Version) {
	t.Helper()
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: lanesDoc(ln, ttl), Revision: "1"}
	c := newFakeConsumer(t, newFakeBroker(), func(context.Context, *Message) error { return nil },
		WithSource(config.Chan(versions)), WithLaneRegistry(reg), WithForwardToken(testToken))
	waitLanes(t, c, ln)
	return c, versions
}

// A lease TTL lowered by a reload is renewed at the new pace: the consumer
// never drops out of the registry.
func TestLeaseTTLLoweredLive(t *testing.T) {
	reg := newRegistry(t)
	c, versions := reloadableLaneConsumer(t, reg, "a", 30*time.Second)
	versions <- config.Version{Config: lanesDoc("a", time.Second), Revision: "2"}
	require.Eventually(t, func() bool { return c.live.Load().leaseTTL == time.Second }, waitLong, time.Millisecond)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		insts, err := reg.Instances(context.Background(), "g", "a")
		require.NoError(t, err)
		require.Len(t, insts, 1, "the consumer of lane a left the registry")
	}
}

// flakyRegistry fails its fail-th Register call.
type flakyRegistry struct {
	*lane.MemoryRegistry
	n    atomic.Int32
	fail int32
}

func (r *flakyRegistry) Register(ctx context.Context, inst lane.Instance, ttl time.Duration) (lane.Lease, error) {
	if r.n.Add(1) == r.fail {
		return nil, errors.New("registry briefly unavailable")
	}
	return r.MemoryRegistry.Register(ctx, inst, ttl)
}

// A move to another lane whose registration fails once is retried by the
// lease loop.
func TestFailedLaneMoveIsRetried(t *testing.T) {
	reg := &flakyRegistry{MemoryRegistry: newRegistry(t), fail: 2}
	c, versions := reloadableLaneConsumer(t, reg, "a", 300*time.Millisecond)
	versions <- config.Version{Config: lanesDoc("b", 300*time.Millisecond), Revision: "2"}
	require.Eventually(t, func() bool { return c.Lane() == "b" }, waitLong, time.Millisecond)
	require.Eventually(t, func() bool {
		b, errB := reg.Instances(context.Background(), "g", "b")
		a, errA := reg.Instances(context.Background(), "g", "a")
		return errA == nil && errB == nil && len(b) == 1 && len(a) == 0
	}, 3*time.Second, 10*time.Millisecond, "the consumer serves lane b but is registered elsewhere")
}

// An ordered retry in place gives the handler a new Message: the one the
// failed run kept is not touched (the race detector checks a goroutine
// that reads it late).
func TestOrderedRetryLeavesKeptMessageAlone(t *testing.T) {
	f := newFakeBroker()
	f.settings.FIFO = true
	var (
		mu    sync.Mutex
		kept  []*Message
		seen  []int
		reads sync.WaitGroup
	)
	reads.Add(1)
	newFakeConsumer(t, f, func(ctx context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		kept = append(kept, m)
		seen = append(seen, m.DeliveryAttempt)
		if len(kept) == 1 {
			go func() {
				defer reads.Done()
				time.Sleep(200 * time.Millisecond)
				_ = m.DeliveryAttempt
			}()
			return errors.New("retry me")
		}
		return nil
	}, WithConfig(fakeDoc(config.Consumer{MaxAttempts: 5})))
	m := msg("o1")
	m.Group = "g1"
	f.push(m)
	f.waitSettled(t, 1)
	reads.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, kept, 2)
	assert.Equal(t, []int{1, 2}, seen)
	assert.NotSame(t, kept[0], kept[1])
	assert.Equal(t, 1, kept[0].DeliveryAttempt, "the consumer changed a Message after its handler returned")
}

// A failed forward cuts its connection's reconnect backoff short: an
// instance back at the same address takes the next forward.
func TestForwardKicksAConnectionInBackoff(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: time.Minute, MaxDelay: time.Minute},
			MinConnectTimeout: connectWait,
		}))
	require.NoError(t, err)
	defer cc.Close()
	fc := &fconn{cc: cc}
	ctx, cancel := context.WithTimeout(context.Background(), connectWait)
	start := time.Now()
	require.False(t, ready(ctx, cc), "nothing listens yet")
	cancel()
	require.Less(t, time.Since(start), connectWait, "a refused connection is given up at once")
	require.Equal(t, connectivity.TransientFailure, cc.GetState())

	lis, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	// With a minute of backoff, only the kick brings the connection back.
	fc.kick()
	ctx, cancel = context.WithTimeout(context.Background(), connectWait)
	defer cancel()
	for cc.GetState() != connectivity.Ready && cc.WaitForStateChange(ctx, cc.GetState()) {
	}
	require.True(t, ready(ctx, cc), "state %v", cc.GetState())
}

// A message with a malformed lane is handled as base and counted.
func TestMalformedLaneIsCounted(t *testing.T) {
	f := newFakeBroker()
	reg := prometheus.NewRegistry()
	handled := make(chan string, 1)
	c := newFakeConsumer(t, f, func(ctx context.Context, m *Message) error {
		handled <- m.Lane
		return nil
	}, WithConfig(fakeDoc(config.Consumer{})), WithRegisterer(reg))
	m := msg("bad")
	m.Properties = map[string]string{lane.PropertyLane: "a..b"}
	f.push(m)
	f.waitSettled(t, 1)
	require.Equal(t, lane.Base, <-handled)
	require.Equal(t, 1.0, testutil.ToFloat64(c.met.malformed))
}
