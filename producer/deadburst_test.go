package producer

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/twinmq/twinmq/config"
)

// sendCounter counts the SendMessage requests leaving a producer, by
// endpoint, as a gRPC client interceptor sees them.
type sendCounter struct {
	mu sync.Mutex
	n  map[string]int
	// failEvery, when set, fails every failEvery-th request to an endpoint
	// of flaky with an internal error, without sending it.
	failEvery int
	flaky     map[string]bool
}

func (c *sendCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption,
) error {
	if strings.HasSuffix(method, "/SendMessage") {
		c.mu.Lock()
		c.n[cc.Target()]++
		fail := c.failEvery > 0 && c.flaky[cc.Target()] && c.n[cc.Target()]%c.failEvery == 0
		c.mu.Unlock()
		if fail {
			return status.Error(codes.Internal, "injected failure")
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *sendCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// With three of four brokers stopped, steady sends go to the live one,
// even though one request in ten fails there (a retryable internal
// error): a stopped broker gets its heartbeat probes, not send requests.
// It used to get a burst of them, as every retry that had tried the live
// broker fell back to the down ones, all of them, before pausing.
func TestStoppedBrokersGetNoSendBursts(t *testing.T) {
	env := startEnv(t, "pay")
	doc := docFor(env, "pay")
	doc.Failover.ProbeInterval = config.Duration(500 * time.Millisecond)
	cnt := &sendCounter{n: map[string]int{}, flaky: map[string]bool{}}
	p := newProducer(t, WithConfig(doc), WithDialOptions(grpc.WithChainUnaryInterceptor(cnt.intercept)))

	loadCtx, stopLoad := context.WithCancel(context.Background())
	log := &sendLog{}
	wg := steadyLoad(loadCtx, p, "pay", 16, 0, log)
	defer func() { stopLoad(); wg.Wait() }()

	var stopped, live []string
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, c := range env.Clusters() {
		for j, b := range c.Brokers() {
			if i == 0 && j == 0 {
				live = append(live, b.Endpoint())
				continue
			}
			require.NoError(t, b.Stop(stopCtx))
			stopped = append(stopped, b.Endpoint())
		}
	}
	require.Len(t, stopped, 3)
	cnt.mu.Lock()
	cnt.failEvery, cnt.flaky[live[0]] = 10, true
	cnt.mu.Unlock()
	// Give failover a second to take the stopped brokers down.
	time.Sleep(time.Second)
	from, before := time.Now(), cnt.snapshot()
	time.Sleep(2 * time.Second)
	after := cnt.snapshot()
	window := time.Since(from)

	ok := 0
	for _, r := range log.since(from) {
		if r.err == nil {
			ok++
		}
	}
	require.Positive(t, ok, "sends succeed on the live broker")
	for _, ep := range live {
		require.Positive(t, after[ep]-before[ep], "live broker %s takes sends", ep)
	}
	// A down broker is probed with heartbeats, not sends; allow a stale
	// verdict or two per probe interval, and slack.
	limit := int(window.Seconds()*2) + 4
	for _, ep := range stopped {
		n := after[ep] - before[ep]
		t.Logf("stopped broker %s: %d send requests in %v", ep, n, window.Round(time.Millisecond))
		require.LessOrEqual(t, n, limit, "send requests to stopped broker %s", ep)
	}
}

// With every broker stopped, a send retries within its deadline, but
// each round of its retries costs one request to a down broker, then a
// pause that doubles: it used to try all four every round.
func TestAllBrokersStoppedRetriesBackOff(t *testing.T) {
	env := startEnv(t, "pay")
	doc := docFor(env, "pay")
	cnt := &sendCounter{n: map[string]int{}}
	p := newProducer(t, WithConfig(doc), WithDialOptions(grpc.WithChainUnaryInterceptor(cnt.intercept)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.Send(ctx, &Message{Topic: "pay", Body: []byte("warm")})
	require.NoError(t, err)
	for _, c := range env.Clusters() {
		for _, b := range c.Brokers() {
			require.NoError(t, b.Stop(ctx))
		}
	}
	before := cnt.snapshot()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = p.Send(sctx, &Message{Topic: "pay", Body: []byte("lost")})
	scancel()
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	after := cnt.snapshot()
	total := 0
	for ep, n := range after {
		total += n - before[ep]
	}
	// Pauses of 20, 40, ..., 640 ms and 1 s fit about seven rounds in 2 s.
	t.Logf("%d send requests to the stopped brokers in 2 s", total)
	require.LessOrEqual(t, total, 10, "one request per round of retries")
	require.GreaterOrEqual(t, total, 2, "the send kept retrying within its deadline")
}
