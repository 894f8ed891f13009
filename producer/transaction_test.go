package producer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

func TestTransactionalMessages(t *testing.T) {
	env := startEnv(t, "orders")
	p := newProducer(t, WithConfig(docFor(env, "orders")))
	ctx := testCtx(t)

	_, err := p.SendTransactional(ctx, &Message{Topic: "orders", Body: []byte("x"), MessageGroup: "g"})
	require.ErrorIs(t, err, ErrInvalidMessage)

	commit, err := p.SendTransactional(ctx, &Message{Topic: "orders", Body: []byte("commit me")})
	require.NoError(t, err)
	require.NotEmpty(t, commit.Result.TransactionID)
	rollback, err := p.SendTransactional(ctx, &Message{Topic: "orders", Body: []byte("roll me back")})
	require.NoError(t, err)
	require.Empty(t, drain(t, env, "orders"), "half messages stay invisible")

	require.NoError(t, commit.Commit(ctx))
	require.ErrorIs(t, commit.Commit(ctx), ErrTransactionEnded)
	require.NoError(t, rollback.Rollback(ctx))
	stored := drain(t, env, "orders")
	require.Len(t, stored, 1)
	require.Equal(t, "commit me", string(stored[commit.Result.MessageID].Body))
}

// Half messages left pending (the sender "crashed" before ending them) are
// resolved by the TransactionChecker when the broker asks.
func TestTransactionCheckerResolvesOrphans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(), MinLongPolling: 50 * time.Millisecond,
		Topics:           []embedded.Topic{{Name: "pay", Type: embedded.Mixed}},
		TransactionCheck: embedded.TransactionCheck{Timeout: 200 * time.Millisecond, Interval: 200 * time.Millisecond, MaxChecks: 50},
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()

	var mu sync.Mutex
	checked := map[string]*CheckedMessage{}
	checker := func(_ context.Context, m *CheckedMessage) TransactionResolution {
		mu.Lock()
		checked[m.MessageID] = m
		mu.Unlock()
		if string(m.Body) == "commit me" {
			return TransactionCommit
		}
		return TransactionRollback
	}
	p := newProducer(t, WithConfig(docFor(env, "pay")), WithTransactionChecker(checker))
	commit, err := p.SendTransactional(lane.WithLane(ctx, "a"), &Message{Topic: "pay", Body: []byte("commit me")})
	require.NoError(t, err)
	rollback, err := p.SendTransactional(ctx, &Message{Topic: "pay", Body: []byte("roll me back")})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return checked[commit.Result.MessageID] != nil && checked[rollback.Result.MessageID] != nil
	}, 30*time.Second, 50*time.Millisecond, "the broker checks both orphans")
	mu.Lock()
	c := checked[commit.Result.MessageID]
	mu.Unlock()
	require.Equal(t, "pay", c.Topic)
	require.Equal(t, env.Clusters()[0].Name, c.Cluster)
	require.Equal(t, commit.Result.TransactionID, c.TransactionID)
	require.Equal(t, "a", c.Lane)

	var stored map[string]*driver.ReceivedMessage
	require.Eventually(t, func() bool {
		stored = drain(t, env, "pay")
		return len(stored) > 0
	}, 30*time.Second, 100*time.Millisecond)
	require.Len(t, stored, 1)
	require.Contains(t, stored, commit.Result.MessageID)
}
