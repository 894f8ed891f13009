package embedded_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/producer"
)

// sdkProducer starts an SDK producer for the logic topic mapped 1:1 onto
// the physical topic of the env's one cluster.
func sdkProducer(t *testing.T, env *embedded.Env, topic string, opts ...producer.Option) *producer.Producer {
	t.Helper()
	cl := env.Clusters()[0]
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{topic: {Clusters: []config.Cluster{
		{Name: cl.Name, Endpoints: cl.Endpoints(), Topic: topic, Weight: config.DefaultWeight},
	}}}
	p, err := producer.New(featureCtx(t), append([]producer.Option{producer.WithConfig(cfg)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// TestSDKTransactionsAndDelay: the transaction cases through the
// SDK producer: commit consumed once, rollback never, and a transaction
// left open by a producer that went away resolved by the checker of the
// producer that replaced it; and an SDK delayed send consumed not before
// its time.
func TestSDKTransactionsAndDelay(t *testing.T) {
	env, b := oneBroker(t, func(o *embedded.Options) {
		o.TransactionCheck = embedded.TransactionCheck{Timeout: 200 * time.Millisecond, Interval: 200 * time.Millisecond, MaxChecks: 50}
	})
	ctx := featureCtx(t)
	first := sdkProducer(t, env, "orders")
	commit, err := first.SendTransactional(ctx, &producer.Message{Topic: "orders", Body: []byte("commit")})
	require.NoError(t, err)
	rollback, err := first.SendTransactional(ctx, &producer.Message{Topic: "orders", Body: []byte("rollback")})
	require.NoError(t, err)
	orphan, err := first.SendTransactional(ctx, &producer.Message{Topic: "orders", Body: []byte("orphan")})
	require.NoError(t, err)
	require.NoError(t, commit.Commit(ctx))
	require.NoError(t, rollback.Rollback(ctx))
	require.NoError(t, first.Close(ctx))

	var mu sync.Mutex
	checked := map[string]int{}
	sdkProducer(t, env, "orders", producer.WithTransactionChecker(func(_ context.Context, m *producer.CheckedMessage) producer.TransactionResolution {
		mu.Lock()
		defer mu.Unlock()
		checked[m.MessageID]++
		if m.MessageID == orphan.Result.MessageID && string(m.Body) == "orphan" {
			return producer.TransactionCommit
		}
		return producer.TransactionUnknown
	}))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return checked[orphan.Result.MessageID] > 0
	}, 20*time.Second, 10*time.Millisecond)
	c := consumerFor(t, "orders", nil)
	got := drainTopic(t, c, b.Endpoint(), "orders", time.Second)
	require.Len(t, got, 2)
	require.Len(t, got[commit.Result.MessageID], 1)
	require.Len(t, got[orphan.Result.MessageID], 1)
	require.Empty(t, got[rollback.Result.MessageID])

	p := sdkProducer(t, env, "later")
	at := time.Now().Add(500 * time.Millisecond).Truncate(time.Millisecond)
	res, err := p.Send(ctx, &producer.Message{Topic: "later", Body: []byte("later"), DeliveryTime: at})
	require.NoError(t, err)
	dc := consumerFor(t, "later", nil)
	var delayed map[string]int
	require.Eventually(t, func() bool {
		for id, ms := range drainTopic(t, dc, b.Endpoint(), "later", 50*time.Millisecond) {
			require.False(t, time.Now().Before(at), "delivered before its time")
			require.Equal(t, at.UnixMilli(), ms[0].DeliveryTime.UnixMilli())
			if delayed == nil {
				delayed = map[string]int{}
			}
			delayed[id] += len(ms)
		}
		return len(delayed) > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, map[string]int{res.MessageID: 1}, delayed)
}
