package embedded_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
)

func sendTx(t *testing.T, p *driver.Client, endpoint, id string) driver.SendResult {
	t.Helper()
	res, err := p.Send(featureCtx(t), endpoint, []*driver.Message{{Topic: "orders", ID: id, Body: []byte("body " + id),
		Transactional: true, QueueID: driver.AnyQueue}})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NotEmpty(t, res[0].TransactionID)
	return res[0]
}

// TestTransactionCommitConsumedOnceRollbackNever: the first two
// transaction cases, through the driver against the embedded broker.
func TestTransactionCommitConsumedOnceRollbackNever(t *testing.T) {
	_, b := oneBroker(t, nil)
	ep := b.Endpoint()
	p := producerFor(t, []string{"orders"}, nil)
	c := consumerFor(t, "orders", nil)
	committed := sendTx(t, p, ep, "tx-commit")
	rolled := sendTx(t, p, ep, "tx-rollback")
	require.Empty(t, drainTopic(t, c, ep, "orders", 300*time.Millisecond), "half messages are invisible")
	require.NoError(t, p.EndTransaction(featureCtx(t), ep, "orders", "tx-commit", committed.TransactionID, driver.TransactionCommit))
	require.NoError(t, p.EndTransaction(featureCtx(t), ep, "orders", "tx-rollback", rolled.TransactionID, driver.TransactionRollback))
	got := drainTopic(t, c, ep, "orders", time.Second)
	require.Len(t, got, 1)
	require.Len(t, got["tx-commit"], 1, "consumed once")
	require.Equal(t, driver.TypeTransaction, got["tx-commit"][0].Type)
	require.Equal(t, []byte("body tx-commit"), got["tx-commit"][0].Body)
}

// orphanAnswers is an OnOrphanedTransaction that records the checks and
// answers with a fixed resolution per message id.
type orphanAnswers struct {
	mu      sync.Mutex
	answers map[string]driver.TransactionResolution
	seen    []*driver.ReceivedMessage
}

func (o *orphanAnswers) fn(_ context.Context, _ string, msg *driver.ReceivedMessage, _ string) driver.TransactionResolution {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, msg)
	return o.answers[msg.ID]
}

func (o *orphanAnswers) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.seen)
}

// TestOrphanResolvedBySuccessor: a producer dies before it resolves its
// transactions; the broker checks them back on the Telemetry stream of the
// producer that replaced it, which commits one and rolls back the other.
func TestOrphanResolvedBySuccessor(t *testing.T) {
	_, b := oneBroker(t, func(o *embedded.Options) {
		o.TransactionCheck = embedded.TransactionCheck{Timeout: 200 * time.Millisecond, Interval: 200 * time.Millisecond, MaxChecks: 50}
	})
	ep := b.Endpoint()
	dying, err := driver.New(driver.Config{Type: driver.Producer, Topics: []string{"orders"}})
	require.NoError(t, err)
	sendTx(t, dying, ep, "orphan-commit")
	sendTx(t, dying, ep, "orphan-rollback")
	require.NoError(t, dying.Close(featureCtx(t)))

	answers := &orphanAnswers{answers: map[string]driver.TransactionResolution{
		"orphan-commit": driver.TransactionCommit, "orphan-rollback": driver.TransactionRollback,
	}}
	successor := producerFor(t, []string{"orders"}, func(c *driver.Config) { c.OnOrphanedTransaction = answers.fn })
	require.NoError(t, successor.Connect(featureCtx(t), ep))
	c := consumerFor(t, "orders", nil)
	require.Eventually(t, func() bool { return answers.count() >= 2 }, 20*time.Second, 10*time.Millisecond)
	got := drainTopic(t, c, ep, "orders", time.Second)
	require.Len(t, got, 1)
	require.Len(t, got["orphan-commit"], 1)
	answers.mu.Lock()
	defer answers.mu.Unlock()
	for _, m := range answers.seen {
		require.Equal(t, "orders", m.Topic)
		require.Equal(t, []byte("body "+m.ID), m.Body)
	}
}

// TestBrokerRestartMidTransaction: half messages and their ids survive a
// broker restart; one is committed by its id afterwards, the other is
// checked back after the restart and rolled back, and a delayed message
// sent before the restart is delivered after it, not before its time.
func TestBrokerRestartMidTransaction(t *testing.T) {
	_, b := oneBroker(t, func(o *embedded.Options) {
		o.TransactionCheck = embedded.TransactionCheck{Timeout: 2 * time.Second, Interval: 200 * time.Millisecond, MaxChecks: 50}
	})
	ep := b.Endpoint()
	answers := &orphanAnswers{answers: map[string]driver.TransactionResolution{"restart-orphan": driver.TransactionRollback}}
	p := producerFor(t, []string{"orders", "later"}, func(c *driver.Config) { c.OnOrphanedTransaction = answers.fn })
	keep := sendTx(t, p, ep, "restart-commit")
	sendTx(t, p, ep, "restart-orphan")
	at := time.Now().Add(1500 * time.Millisecond)
	_, err := p.Send(featureCtx(t), ep, []*driver.Message{{Topic: "later", ID: "restart-delay", Body: []byte("later"),
		DeliveryTime: at, QueueID: driver.AnyQueue}})
	require.NoError(t, err)

	require.NoError(t, b.Restart(featureCtx(t)))
	require.NoError(t, p.EndTransaction(featureCtx(t), ep, "orders", "restart-commit", keep.TransactionID, driver.TransactionCommit))
	require.Eventually(t, func() bool { return answers.count() >= 1 }, 20*time.Second, 10*time.Millisecond)
	c := consumerFor(t, "orders", nil)
	got := drainTopic(t, c, ep, "orders", time.Second)
	require.Len(t, got, 1)
	require.Len(t, got["restart-commit"], 1)

	dc := consumerFor(t, "later", nil)
	var delayed map[string][]*driver.ReceivedMessage
	require.Eventually(t, func() bool {
		delayed = drainTopic(t, dc, ep, "later", 100*time.Millisecond)
		return len(delayed) > 0
	}, 20*time.Second, 10*time.Millisecond)
	require.False(t, time.Now().Before(at), "delivered before its time")
	require.Len(t, delayed["restart-delay"], 1)
	require.Equal(t, at.UnixMilli(), delayed["restart-delay"][0].DeliveryTime.UnixMilli())
}
