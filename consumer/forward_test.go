package consumer

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/pb/forwardpb"
	"github.com/twinmq/twinmq/lane"
)

func newRegistry(t *testing.T) *lane.MemoryRegistry {
	reg := lane.NewMemoryRegistry(lane.MemoryOptions{})
	t.Cleanup(func() { _ = reg.Close() })
	return reg
}

// laneFake runs a consumer in ln on its own fake broker, registered in reg.
func laneFake(t *testing.T, reg lane.Registry, ln string, h Handler, opts ...Option) (*Consumer, *fakeBroker) {
	f := newFakeBroker()
	cfg := fakeDoc(config.Consumer{})
	cfg.Lanes.LeaseTTL = config.Duration(2 * time.Second)
	opts = append([]Option{WithConfig(cfg), WithLane(ln), WithLaneRegistry(reg), WithForwardToken(testToken),
		WithInstanceName("fake-" + ln)}, opts...)
	return newFakeConsumer(t, f, h, opts...), f
}

func waitLanes(t *testing.T, c *Consumer, lanes ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		snap := c.lanes.state.Load().snap
		for _, l := range lanes {
			if !snap.Live(l) {
				return false
			}
		}
		return true
	}, waitLong, 5*time.Millisecond)
}

func TestForwardServiceAuthAndLane(t *testing.T) {
	reg := newRegistry(t)
	var (
		mu  sync.Mutex
		got []*Message
		ctl []string
	)
	c, _ := laneFake(t, reg, "a", func(ctx context.Context, m *Message) error {
		l, _ := lane.FromContext(ctx)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m)
		ctl = append(ctl, l)
		if string(m.Body) == "fail" {
			return errors.New("handler says no")
		}
		return nil
	})
	cc, err := grpc.NewClient(c.ForwardAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	client := forwardpb.NewForwarderClient(cc)
	req := func(ln, body string) *forwardpb.DeliverRequest {
		return &forwardpb.DeliverRequest{Group: "g", Lane: ln, Message: &forwardpb.ForwardedMessage{
			Topic: "t", MessageId: "id-" + body, Body: []byte(body), DeliveryAttempt: 1,
			UserProperties: map[string]string{lane.PropertyLane: "a.z"},
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = client.Deliver(ctx, req("a", "x"))
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "no token")
	_, err = client.Deliver(metadata.AppendToOutgoingContext(ctx, ForwardTokenHeader, "group-secreT"), req("a", "x"))
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "wrong token")

	auth := metadata.AppendToOutgoingContext(ctx, ForwardTokenHeader, testToken)
	resp, err := client.Deliver(auth, req("b", "x"))
	require.NoError(t, err)
	assert.Equal(t, forwardpb.DeliverCode_DELIVER_CODE_NOT_MY_LANE, resp.GetCode())
	resp, err = client.Deliver(auth, req("a", "ok"))
	require.NoError(t, err)
	assert.Equal(t, forwardpb.DeliverCode_DELIVER_CODE_HANDLED, resp.GetCode())
	resp, err = client.Deliver(auth, req("a", "fail"))
	require.NoError(t, err)
	assert.Equal(t, forwardpb.DeliverCode_DELIVER_CODE_HANDLER_FAILED, resp.GetCode())
	assert.Contains(t, resp.GetMessage(), "handler says no")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2, "refused deliveries never reach the handler")
	assert.True(t, got[0].Forwarded)
	assert.Equal(t, "a.z", got[0].Lane)
	assert.Equal(t, []string{"a.z", "a.z"}, ctl, "the handler's ctx carries the message's lane")
}

// TestForwardFallsBackPastDeadInstance: the only "a.x" instance is
// registered but unreachable; the origin tries it, then falls back to "a",
// whose handler runs, and acks only then.
func TestForwardFallsBackPastDeadInstance(t *testing.T) {
	reg := newRegistry(t)
	var handledByA sync.WaitGroup
	handledByA.Add(1)
	metrics := prometheus.NewRegistry()
	origin, f := laneFake(t, reg, "", func(ctx context.Context, m *Message) error {
		t.Errorf("base must not handle %s", m.ID)
		return nil
	}, WithRegisterer(metrics))
	laneFake(t, reg, "a", func(ctx context.Context, m *Message) error {
		handledByA.Done()
		return nil
	})
	// A dead a.x: an address where nothing listens.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := lis.Addr().String()
	require.NoError(t, lis.Close())
	lease, err := reg.Register(context.Background(), lane.Instance{Group: "g", Lane: "a.x", ID: "ghost", Addr: dead}, time.Minute)
	require.NoError(t, err)
	defer func() { _ = lease.Release(context.Background()) }()
	waitLanes(t, origin, "", "a", "a.x")

	m := msg("to-ax")
	m.Properties = map[string]string{lane.PropertyLane: "a.x"}
	f.push(m)
	handledByA.Wait()
	f.waitSettled(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, []string{"to-ax"}, f.acks)
	assert.Equal(t, 1.0, testutil.ToFloat64(counterWith(t, metrics, "twinmq_consumer_forwarded_total", "result", "unreachable")))
	assert.Equal(t, 1.0, testutil.ToFloat64(counterWith(t, metrics, "twinmq_consumer_forwarded_total", "result", "handled")))
	assert.Equal(t, 1.0, testutil.ToFloat64(counterWith(t, metrics, "twinmq_consumer_fallback_level_total", "level", "1")))
}

// TestLanesKillSwitch: with lanes.enabled false every consumer handles what
// it receives, whatever the lane.
func TestLanesKillSwitch(t *testing.T) {
	reg := newRegistry(t)
	f := newFakeBroker()
	cfg := fakeDoc(config.Consumer{})
	cfg.Lanes.Enabled = false
	got := make(chan string, 2)
	c := newFakeConsumer(t, f, func(ctx context.Context, m *Message) error {
		got <- m.ID
		return nil
	}, WithConfig(cfg), WithLane("a"), WithLaneRegistry(reg), WithForwardToken(testToken))
	waitLanes(t, c, "a")
	m := msg("lane-b")
	m.Properties = map[string]string{lane.PropertyLane: "b"}
	f.push(msg("base"), m)
	f.waitSettled(t, 2)
	assert.ElementsMatch(t, []string{"base", "lane-b"}, []string{<-got, <-got})
}

// TestHoldWithoutBase: a base message in a group with no base consumer is
// left for redelivery, never handled by another lane.
func TestHoldWithoutBase(t *testing.T) {
	reg := newRegistry(t)
	c, f := laneFake(t, reg, "a", func(ctx context.Context, m *Message) error {
		t.Errorf("lane a must not handle base message %s", m.ID)
		return nil
	})
	waitLanes(t, c, "a")
	f.push(msg("base-msg"))
	f.waitSettled(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Len(t, f.nacks["base-msg"], 1)
	assert.Empty(t, f.acks)
}

// TestLaneFollowsConfig: without WithLane the consumer's lane is the
// document's, and a new document moves its registration.
func TestLaneFollowsConfig(t *testing.T) {
	reg := newRegistry(t)
	c, versions := reloadableLaneConsumer(t, reg, "a", 2*time.Second)
	assert.Equal(t, "a", c.Lane())

	versions <- config.Version{Config: lanesDoc("b.c", 2*time.Second), Revision: "2"}
	require.Eventually(t, func() bool {
		snap := c.lanes.state.Load().snap
		return c.Lane() == "b.c" && snap.Live("b.c") && !snap.Live("a")
	}, waitLong, 5*time.Millisecond)
	insts, err := reg.Instances(context.Background(), "g", "b.c")
	require.NoError(t, err)
	require.Len(t, insts, 1)
	assert.Equal(t, c.InstanceID(), insts[0].ID)
	assert.Equal(t, c.ForwardAddr(), insts[0].Addr)
}
