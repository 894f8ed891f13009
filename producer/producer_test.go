package producer

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/rmqerr"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSendReachesBothClustersAndIsStored(t *testing.T) {
	env := startEnv(t, "orders")
	p := newProducer(t, WithConfig(docFor(env, "orders")))
	ctx := testCtx(t)

	// Picks stick to a broker for a few milliseconds, so spreading shows over
	// time: keep sending until both clusters got messages.
	perCluster := map[string]int{}
	sent := map[string]*SendResult{}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; len(perCluster) < 2 || i < 200; i++ {
		require.True(t, time.Now().Before(deadline), "equal weights spread traffic over both clusters: %v", perCluster)
		r, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte(fmt.Sprintf("m%d", i)), Tag: "t"})
		require.NoError(t, err)
		require.NotEmpty(t, r.MessageID)
		require.Equal(t, "orders", r.Topic)
		require.Equal(t, 1, r.Attempts)
		perCluster[r.Cluster]++
		sent[r.MessageID] = r
		time.Sleep(time.Millisecond)
	}

	stored := drain(t, env, "orders")
	require.Len(t, stored, len(sent))
	for id, r := range sent {
		m, ok := stored[id]
		require.True(t, ok, "message %s was acknowledged but is not stored", id)
		require.Equal(t, r.Offset, m.QueueOffset, "result offset of %s", id)
		require.Equal(t, r.QueueID, m.QueueID)
	}
}

func TestLaneFromContextIsStamped(t *testing.T) {
	env := startEnv(t, "orders")
	p := newProducer(t, WithConfig(docFor(env, "orders")))
	ctx := testCtx(t)

	r1, err := p.Send(lane.WithLane(ctx, "a.x"), &Message{Topic: "orders", Body: []byte("lane"), Properties: map[string]string{"k": "v"}})
	require.NoError(t, err)
	require.Equal(t, "a.x", r1.Lane)
	r2, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("base")})
	require.NoError(t, err)
	require.Equal(t, "", r2.Lane)

	stored := drain(t, env, "orders")
	require.Equal(t, "a.x", stored[r1.MessageID].Properties[lane.PropertyLane])
	require.Equal(t, "v", stored[r1.MessageID].Properties["k"])
	require.NotContains(t, stored[r2.MessageID].Properties, lane.PropertyLane)

	_, err = p.Send(lane.WithLane(ctx, "A..x"), &Message{Topic: "orders", Body: []byte("x")})
	require.ErrorIs(t, err, ErrMalformedLane)
	require.ErrorIs(t, err, lane.ErrMalformedLane)
}

func TestBadInputIsRefusedAtOnce(t *testing.T) {
	env := startEnv(t, "orders")
	p := newProducer(t, WithConfig(docFor(env, "orders")))
	ctx := testCtx(t)

	_, err := p.Send(ctx, &Message{Topic: "nope", Body: []byte("x")})
	require.ErrorIs(t, err, ErrUnknownTopic)
	require.Contains(t, err.Error(), "orders", "the error lists the known topics")
	_, err = p.Send(ctx, &Message{Topic: "orders"})
	require.ErrorIs(t, err, ErrEmptyBody)
	_, err = p.Send(ctx, &Message{Topic: "orders", Body: make([]byte, DefaultMaxBodyBytes+1)})
	require.ErrorIs(t, err, ErrBodyTooLarge)
	_, err = p.Send(ctx, &Message{Topic: "orders", Body: []byte("x"), Properties: map[string]string{"TAGS": "x"}})
	require.ErrorIs(t, err, ErrReservedProperty)
	_, err = p.Send(ctx, nil)
	require.ErrorIs(t, err, ErrInvalidMessage)

	var got error
	p.SendAsync(ctx, &Message{Topic: "nope", Body: []byte("x")}, func(_ *SendResult, err error) { got = err })
	require.ErrorIs(t, got, ErrUnknownTopic, "SendAsync reports bad input before returning")

	_, err = p.SendBatch(ctx, []*Message{{Topic: "orders", Body: []byte("ok")}, {Topic: "orders"}})
	require.ErrorIs(t, err, ErrEmptyBody)
	require.Contains(t, err.Error(), "message 1")
	require.Empty(t, drain(t, env, "orders"), "nothing of an invalid batch is sent")

	require.NoError(t, p.Close(ctx))
	_, err = p.Send(ctx, &Message{Topic: "orders", Body: []byte("x")})
	require.ErrorIs(t, err, ErrClosed)
	p.SendAsync(ctx, &Message{Topic: "orders", Body: []byte("x")}, func(_ *SendResult, err error) { got = err })
	require.ErrorIs(t, got, ErrClosed)
	_, err = p.SendBatch(ctx, []*Message{{Topic: "orders", Body: []byte("x")}})
	require.ErrorIs(t, err, ErrClosed)
}

func TestNewNeedsOneConfig(t *testing.T) {
	_, err := New(context.Background())
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestSendAsyncAndBatch(t *testing.T) {
	env := startEnv(t, "orders")
	p := newProducer(t, WithConfig(docFor(env, "orders")))
	ctx := testCtx(t)

	const n = 300
	var (
		mu  sync.Mutex
		ids = map[string]bool{}
		wg  sync.WaitGroup
	)
	wg.Add(n)
	for i := range n {
		p.SendAsync(ctx, &Message{Topic: "orders", Body: []byte(strconv.Itoa(i))}, func(r *SendResult, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("async send %d: %v", i, err)
				return
			}
			mu.Lock()
			ids[r.MessageID] = true
			mu.Unlock()
		})
	}
	wg.Wait()

	msgs := make([]*Message, 100)
	for i := range msgs {
		msgs[i] = &Message{Topic: "orders", Body: []byte("b" + strconv.Itoa(i))}
	}
	res, err := p.SendBatch(ctx, msgs)
	require.NoError(t, err)
	require.Len(t, res, len(msgs))
	for _, r := range res {
		ids[r.MessageID] = true
	}
	require.Len(t, ids, n+len(msgs))

	stored := drain(t, env, "orders")
	require.Len(t, stored, len(ids))
	for i, r := range res {
		require.Equal(t, "b"+strconv.Itoa(i), string(stored[r.MessageID].Body), "results are in message order")
	}
}

// Messages of a FIFO group sent one after the other, from concurrent
// groups, are stored in one queue in send order.
func TestFIFOGroupsKeepOrder(t *testing.T) {
	env := startEnv(t, "orders")
	p := newProducer(t, WithConfig(docFor(env, "orders")))
	ctx := testCtx(t)

	const groups, perGroup = 8, 50
	var wg sync.WaitGroup
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var wait sync.WaitGroup
			for i := range perGroup {
				// Asynchronous sends of one group, issued in order, must be
				// stored in that order too.
				wait.Add(1)
				p.SendAsync(ctx, &Message{
					Topic: "orders", MessageGroup: "g" + strconv.Itoa(g),
					Body: []byte(fmt.Sprintf("%d/%03d", g, i)),
				}, func(_ *SendResult, err error) {
					defer wait.Done()
					if err != nil {
						t.Errorf("group %d message %d: %v", g, i, err)
					}
				})
			}
			wait.Wait()
		}()
	}
	wg.Wait()

	stored := drain(t, env, "orders")
	require.Len(t, stored, groups*perGroup)
	type pos struct {
		where  string
		offset int64
	}
	byGroup := map[string][]pos{}
	bodies := map[pos]string{}
	for _, m := range stored {
		require.NotEmpty(t, m.Group)
		ps := pos{fmt.Sprintf("%s/%d", m.Endpoint, m.QueueID), m.QueueOffset}
		byGroup[m.Group] = append(byGroup[m.Group], ps)
		bodies[ps] = string(m.Body)
	}
	for g, ps := range byGroup {
		require.Len(t, ps, perGroup)
		for _, x := range ps {
			require.Equal(t, ps[0].where, x.where, "group %s stays in one queue", g)
		}
		// Sorting by offset must give the send order.
		byOffset := map[int64]string{}
		var offs []int64
		for _, x := range ps {
			byOffset[x.offset] = bodies[x]
			offs = append(offs, x.offset)
		}
		slices.Sort(offs)
		for i, o := range offs {
			require.Equal(t, fmt.Sprintf("%s/%03d", g[1:], i), byOffset[o], "group %s position %d", g, i)
		}
	}
}

func TestDelayedMessageIsDeliveredAtItsTime(t *testing.T) {
	ctx := testCtx(t)
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(), MinLongPolling: 50 * time.Millisecond,
		Topics: []embedded.Topic{{Name: "later", Queues: 1, Type: embedded.Mixed}},
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()
	p := newProducer(t, WithConfig(docFor(env, "later")))

	at := time.Now().Add(1500 * time.Millisecond)
	delayed, err := p.Send(ctx, &Message{Topic: "later", Body: []byte("later"), DeliveryTime: at})
	require.NoError(t, err)
	now, err := p.Send(ctx, &Message{Topic: "later", Body: []byte("now")})
	require.NoError(t, err)

	first := drain(t, env, "later")
	require.Contains(t, first, now.MessageID)
	if time.Now().Before(at) {
		require.NotContains(t, first, delayed.MessageID, "not visible before its delivery time")
	}
	require.Eventually(t, func() bool {
		_, ok := drain(t, env, "later")[delayed.MessageID]
		return ok
	}, 30*time.Second, 100*time.Millisecond, "delivered once its time came")
	require.False(t, time.Now().Before(at))
}

// Close waits for what is buffered or in flight: every async send that was
// accepted before Close completes successfully and is stored.
func TestCloseFlushesPendingSends(t *testing.T) {
	env := startEnv(t, "orders")
	p := newProducer(t, WithConfig(docFor(env, "orders")))
	ctx := testCtx(t)
	const n = 500
	var ok, failed atomicCounter
	for i := range n {
		p.SendAsync(ctx, &Message{Topic: "orders", Body: []byte(strconv.Itoa(i))}, func(_ *SendResult, err error) {
			if err != nil {
				failed.add()
				return
			}
			ok.add()
		})
	}
	require.NoError(t, p.Close(ctx))
	require.Equal(t, int64(n), ok.get())
	require.Zero(t, failed.get())
	require.Len(t, drain(t, env, "orders"), n)
}

// With every broker gone, a send fails when its deadline ends, not before
// and not much after.
func TestSendFailsAtItsDeadlineWhenEverythingIsDown(t *testing.T) {
	env := startEnv(t, "orders")
	p := newProducer(t, WithConfig(docFor(env, "orders")))
	ctx := testCtx(t)
	_, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("warm")})
	require.NoError(t, err)
	for _, c := range env.Clusters() {
		for _, b := range c.Brokers() {
			require.NoError(t, b.Stop(ctx))
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = p.Send(sctx, &Message{Topic: "orders", Body: []byte("lost cause")})
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second, "the send gives up at its deadline")
}

type atomicCounter struct{ v atomic.Int64 }

func (c *atomicCounter) add()       { c.v.Add(1) }
func (c *atomicCounter) get() int64 { return c.v.Load() }

// A message the broker refuses for good (here a FIFO message on a topic
// that takes normal messages only) fails alone, at once, without retries;
// the rest of the batch is stored, and the BatchError says which failed.
func TestSendBatchReportsPerMessageFailures(t *testing.T) {
	ctx := testCtx(t)
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(), MinLongPolling: 50 * time.Millisecond,
		Topics: []embedded.Topic{{Name: "plain", Queues: 2, Type: embedded.Normal}},
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()
	p := newProducer(t, WithConfig(docFor(env, "plain")))

	msgs := []*Message{
		{Topic: "plain", Body: []byte("0")},
		{Topic: "plain", Body: []byte("1"), MessageGroup: "g"},
		{Topic: "plain", Body: []byte("2")},
	}
	res, err := p.SendBatch(ctx, msgs)
	var be *BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Errs, 3)
	require.NoError(t, be.Errs[0])
	require.Error(t, be.Errs[1])
	require.ErrorIs(t, be.Errs[1], driver.ErrBadRequest)
	require.ErrorIs(t, be.Errs[1], rmqerr.ErrBadRequest)
	var refusal *rmqerr.Error
	require.ErrorAs(t, be.Errs[1], &refusal)
	require.Equal(t, rmqerr.CodeMessagePropertyConflictWithType, refusal.Code)
	require.Contains(t, be.Errs[1].Error(), "after 1 attempt:", "a refused message is not retried")
	require.NoError(t, be.Errs[2])
	require.NotNil(t, res[0])
	require.Nil(t, res[1])
	require.NotNil(t, res[2])
	require.Len(t, drain(t, env, "plain"), 2)
}

func TestMetricsRegistration(t *testing.T) {
	env := startEnv(t, "orders")
	ctx := testCtx(t)
	reg := prometheus.NewRegistry()
	as := func(name string) Option {
		return WithRegisterer(prometheus.WrapRegistererWith(prometheus.Labels{"producer": name}, reg))
	}
	p1, err := New(ctx, WithConfig(docFor(env, "orders")), as("one"))
	require.NoError(t, err)
	_, err = p1.Send(ctx, &Message{Topic: "orders", Body: []byte("x")})
	require.NoError(t, err)
	require.Positive(t, metricValue(t, reg, "twinmq_producer_sends_total", map[string]string{"producer": "one", "result": resultOK}))

	_, err = New(ctx, WithConfig(docFor(env, "orders")), as("one"))
	require.ErrorIs(t, err, ErrInvalidConfig, "a second producer with the same labels")

	// Distinct labels tell two producers apart on one registry.
	p2, err := New(ctx, WithConfig(docFor(env, "orders")), as("two"))
	require.NoError(t, err)
	require.NoError(t, p2.Close(ctx))

	// Close unregisters, so a new producer can take the labels over.
	require.NoError(t, p1.Close(ctx))
	p3, err := New(ctx, WithConfig(docFor(env, "orders")), as("one"))
	require.NoError(t, err)
	require.NoError(t, p3.Close(ctx))
}

func TestNewRefusesABadFirstConfiguration(t *testing.T) {
	ctx := testCtx(t)
	bad := config.Default()
	bad.Topics = map[string]config.Topic{"t": {Clusters: []config.Cluster{{Name: "c", Endpoints: []string{"not an endpoint"}}}}}
	_, err := New(ctx, WithConfig(bad))
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorIs(t, err, config.ErrInvalidConfig)

	path := filepath.Join(t.TempDir(), "missing.json")
	_, err = New(ctx, WithSource(config.File(path, config.FileOptions{})))
	require.ErrorIs(t, err, ErrInvalidConfig, "a missing file gives the producer nothing to start with")
	require.ErrorIs(t, err, config.ErrInvalidConfig)
	require.ErrorContains(t, err, "no such file")
}

// A ctx that has already ended fails New every time with ctx's error, and
// never as an invalid configuration. Starting the configuration's watcher
// used to pick at random between its first version (ready at once) and the
// ended ctx, so New succeeded about half the time.
func TestNewWithAnEndedContextAlwaysFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		p, err := New(ctx, WithConfig(noRouteConfig()))
		if err == nil {
			_ = p.Close(testCtx(t))
			t.Fatalf("New succeeded with a cancelled ctx (call %d)", i)
		}
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrInvalidConfig)
	}
}
