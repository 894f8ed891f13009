//go:build interop

package interop

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
)

// Topics of type DELAY and TRANSACTION and the group created by
// interop/run.sh.
const (
	delayTopic = "interop_delay"
	txTopic    = "interop_tx"
	featGroup  = "interop_group"
)

func featureClient(t *testing.T, cfg driver.Config) *driver.Client {
	t.Helper()
	c, err := driver.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// receiveUntil receives (and acks) from topic until want holds for the
// messages so far or the time is up. The proxy pops from every queue of a
// broker whatever queue is named, so one queue per broker is asked. It
// returns the messages by id and when each was first seen.
func receiveUntil(t *testing.T, c *driver.Client, endpoint, topic string, within time.Duration, want func(map[string][]*driver.ReceivedMessage) bool) (map[string][]*driver.ReceivedMessage, map[string]time.Time) {
	t.Helper()
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	route, err := c.QueryRoute(rctx, endpoint, topic)
	cancel()
	require.NoError(t, err)
	var queues []driver.Queue
	seen := map[string]bool{}
	for _, q := range route.ReadableQueues() {
		if !seen[q.Broker] {
			seen[q.Broker] = true
			queues = append(queues, q)
		}
	}
	got := map[string][]*driver.ReceivedMessage{}
	when := map[string]time.Time{}
	end := time.Now().Add(within)
	for !want(got) && time.Now().Before(end) {
		for _, q := range queues {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			msgs, err := c.Receive(ctx, driver.ReceiveRequest{Queue: q, BatchSize: 32, InvisibleDuration: 30 * time.Second,
				LongPollingTimeout: 5 * time.Second})
			require.NoError(t, err)
			now := time.Now()
			for _, m := range msgs {
				got[m.ID] = append(got[m.ID], m)
				if _, ok := when[m.ID]; !ok {
					when[m.ID] = now
				}
				_, err := c.Ack(ctx, m.Endpoint, topic, []driver.AckEntry{{MessageID: m.ID, ReceiptHandle: m.ReceiptHandle}})
				require.NoError(t, err)
			}
			cancel()
		}
	}
	return got, when
}

// TestInteropDelayedSend: a message with a delivery time 3 s ahead is not
// delivered before it and arrives with that delivery time.
func TestInteropDelayedSend(t *testing.T) {
	ep := endpointFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := featureClient(t, driver.Config{Type: driver.Producer, Topics: []string{delayTopic}})
	c := featureClient(t, driver.Config{Type: driver.SimpleConsumer, Group: featGroup,
		Subscriptions: []driver.Subscription{{Topic: delayTopic}}})
	// Drain leftovers of earlier runs first.
	receiveUntil(t, c, ep, delayTopic, time.Second, func(map[string][]*driver.ReceivedMessage) bool { return false })

	id := p.NewMessageID()
	at := time.Now().Add(3 * time.Second).Truncate(time.Millisecond) // the protocol keeps milliseconds
	res, err := p.Send(ctx, ep, []*driver.Message{{Topic: delayTopic, ID: id, Body: []byte("later"), DeliveryTime: at, QueueID: driver.AnyQueue}})
	require.NoError(t, err)
	require.Len(t, res, 1)
	got, when := receiveUntil(t, c, ep, delayTopic, 30*time.Second, func(g map[string][]*driver.ReceivedMessage) bool { return len(g[id]) > 0 })
	require.Len(t, got[id], 1)
	require.False(t, when[id].Before(at), "delivered before its time")
	require.Equal(t, at.UnixMilli(), got[id][0].DeliveryTime.UnixMilli())
	require.Equal(t, driver.TypeDelay, got[id][0].Type)
}

// TestInteropTransactions: commit is delivered once, rollback never, and an
// orphan is checked back on this producer's Telemetry stream and resolved
// by its answer, as on the embedded broker.
func TestInteropTransactions(t *testing.T) {
	ep := endpointFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	checked := map[string]int{}
	orphanID := ""
	p := featureClient(t, driver.Config{Type: driver.Producer, Topics: []string{txTopic},
		OnOrphanedTransaction: func(_ context.Context, _ string, msg *driver.ReceivedMessage, _ string) driver.TransactionResolution {
			mu.Lock()
			defer mu.Unlock()
			checked[msg.ID]++
			if msg.ID == orphanID {
				return driver.TransactionCommit
			}
			// Not this test's: another test's producer decides it.
			return driver.TransactionUnknown
		}})
	c := featureClient(t, driver.Config{Type: driver.SimpleConsumer, Group: featGroup,
		Subscriptions: []driver.Subscription{{Topic: txTopic}}})
	receiveUntil(t, c, ep, txTopic, time.Second, func(map[string][]*driver.ReceivedMessage) bool { return false })

	send := func(id string) string {
		res, err := p.Send(ctx, ep, []*driver.Message{{Topic: txTopic, ID: id, Body: []byte("tx " + id), Transactional: true, QueueID: driver.AnyQueue}})
		require.NoError(t, err)
		require.NotEmpty(t, res[0].TransactionID)
		return res[0].TransactionID
	}
	commitID, rollbackID := p.NewMessageID(), p.NewMessageID()
	mu.Lock()
	orphanID = p.NewMessageID()
	mu.Unlock()
	commitTx := send(commitID)
	rollbackTx := send(rollbackID)
	send(orphanID)
	require.NoError(t, p.EndTransaction(ctx, ep, txTopic, commitID, commitTx, driver.TransactionCommit))
	require.NoError(t, p.EndTransaction(ctx, ep, txTopic, rollbackID, rollbackTx, driver.TransactionRollback))

	// The broker's first check comes after transactionTimeOut (6 s) on its
	// check interval; allow a couple of rounds.
	got, _ := receiveUntil(t, c, ep, txTopic, 120*time.Second, func(g map[string][]*driver.ReceivedMessage) bool {
		return len(g[commitID]) > 0 && len(g[orphanID]) > 0
	})
	require.Len(t, got[commitID], 1, "committed: consumed once")
	require.Len(t, got[orphanID], 1, "orphan: committed by the check-back")
	require.Empty(t, got[rollbackID], "rolled back: never consumed")
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, checked[orphanID], 1)
}
