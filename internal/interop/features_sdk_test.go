//go:build interop

package interop

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/producer"
)

// TestInteropSDKDelayedSend: a delayed message sent through the SDK
// producer (batching on: it goes alone) to the DELAY topic arrives not
// before its time, with its delivery time.
func TestInteropSDKDelayedSend(t *testing.T) {
	ep := endpointFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := featureClient(t, driver.Config{Type: driver.SimpleConsumer, Group: featGroup,
		Subscriptions: []driver.Subscription{{Topic: delayTopic}}})
	receiveUntil(t, c, ep, delayTopic, time.Second, func(map[string][]*driver.ReceivedMessage) bool { return false })

	p := sdkProducer(t, producer.WithConfig(sdkConfig(ep, "sdk_later", true, sdkCluster{name: "dc1", physical: delayTopic, weight: 100})))
	at := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	res, err := p.Send(ctx, &producer.Message{Topic: "sdk_later", Body: []byte("later"), DeliveryTime: at})
	require.NoError(t, err)
	require.Equal(t, delayTopic, res.PhysicalTopic)
	id := res.MessageID
	got, when := receiveUntil(t, c, ep, delayTopic, 30*time.Second, func(g map[string][]*driver.ReceivedMessage) bool { return len(g[id]) > 0 })
	require.Len(t, got[id], 1)
	require.False(t, when[id].Before(at), "delivered before its time")
	require.Equal(t, at.UnixMilli(), got[id][0].DeliveryTime.UnixMilli())
}

// TestInteropSDKTransactions: through the SDK producer, a committed
// transaction is consumed once, a rolled back one never, and one left open
// by a producer that closed is checked back on its successor, whose
// checker commits it.
func TestInteropSDKTransactions(t *testing.T) {
	ep := endpointFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := featureClient(t, driver.Config{Type: driver.SimpleConsumer, Group: featGroup,
		Subscriptions: []driver.Subscription{{Topic: txTopic}}})
	receiveUntil(t, c, ep, txTopic, time.Second, func(map[string][]*driver.ReceivedMessage) bool { return false })
	cfg := func() producer.Option {
		return producer.WithConfig(sdkConfig(ep, "sdk_orders", true, sdkCluster{name: "dc1", physical: txTopic, weight: 100}))
	}

	// The first producer ends two transactions and leaves one open.
	first, err := producer.New(ctx, cfg())
	require.NoError(t, err)
	commit, err := first.SendTransactional(ctx, &producer.Message{Topic: "sdk_orders", Body: []byte("commit")})
	require.NoError(t, err)
	rollback, err := first.SendTransactional(ctx, &producer.Message{Topic: "sdk_orders", Body: []byte("rollback")})
	require.NoError(t, err)
	orphan, err := first.SendTransactional(ctx, &producer.Message{Topic: "sdk_orders", Body: []byte("orphan")})
	require.NoError(t, err)
	require.NoError(t, commit.Commit(ctx))
	require.NoError(t, rollback.Rollback(ctx))
	require.NoError(t, first.Close(ctx))

	// Its successor answers the broker's check of the open one.
	var mu sync.Mutex
	checked := map[string]int{}
	sdkProducer(t, cfg(), producer.WithTransactionChecker(func(_ context.Context, m *producer.CheckedMessage) producer.TransactionResolution {
		mu.Lock()
		defer mu.Unlock()
		checked[m.MessageID]++
		if m.MessageID == orphan.Result.MessageID {
			return producer.TransactionCommit
		}
		return producer.TransactionUnknown
	}))
	ids := map[string]string{"commit": commit.Result.MessageID, "rollback": rollback.Result.MessageID, "orphan": orphan.Result.MessageID}
	got, _ := receiveUntil(t, c, ep, txTopic, 120*time.Second, func(g map[string][]*driver.ReceivedMessage) bool {
		return len(g[ids["commit"]]) > 0 && len(g[ids["orphan"]]) > 0
	})
	require.Len(t, got[ids["commit"]], 1, "committed: consumed once")
	require.Len(t, got[ids["orphan"]], 1, "orphan: committed by the successor's checker")
	require.Empty(t, got[ids["rollback"]], "rolled back: never consumed")
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, checked[ids["orphan"]], 1)
}
