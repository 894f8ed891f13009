package txn

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// appender is the broker's Deliverer: append to the real topic.
type appender struct{ st *store.Store }

func (a appender) Deliver(ctx context.Context, m store.Message) error {
	_, err := a.st.Append(ctx, []store.Message{m})
	return err
}

type checkCall struct {
	group, txID string
	msg         store.StoredMessage
}

type checker struct {
	mu     sync.Mutex
	calls  []checkCall
	answer func(checkCall)
}

func (c *checker) CheckBack(_ context.Context, group string, msg store.StoredMessage, txID string) error {
	cc := checkCall{group, txID, msg}
	c.mu.Lock()
	c.calls = append(c.calls, cc)
	answer := c.answer
	c.mu.Unlock()
	if answer != nil {
		go answer(cc)
	}
	return nil
}

func (c *checker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

type env struct {
	dir string
	st  *store.Store
	m   *Manager
}

func openEnv(t *testing.T, dir string, c Checker, mod func(*Options)) *env {
	t.Helper()
	st, err := store.Open(testCtx(t), store.Options{Dir: filepath.Join(dir, "store"), SegmentSize: 8 << 20})
	require.NoError(t, err)
	o := Options{Store: st, Deliverer: appender{st}, Checker: c, Timeout: time.Hour, CheckInterval: time.Hour}
	if mod != nil {
		mod(&o)
	}
	m, err := Open(testCtx(t), o)
	require.NoError(t, err)
	e := &env{dir: dir, st: st, m: m}
	t.Cleanup(e.close)
	return e
}

func (e *env) close() {
	e.m.Close()
	e.st.Close()
}

func txMsg(id, topic string, q int32) store.Message {
	return store.Message{
		Topic: topic, QueueID: q, BornTimestamp: 5, BornHost: "127.0.0.1", Tag: "tx",
		Properties: map[string]string{"UNIQ_KEY": id, "TRAN_MSG": "true", "user": "u"},
		Body:       []byte("body " + id),
	}
}

func readTopic(t *testing.T, st *store.Store, topic string, q int32) []store.StoredMessage {
	t.Helper()
	require.NoError(t, st.WaitDispatched(testCtx(t)))
	_, max := st.Offsets(topic, q)
	if max == 0 {
		return nil
	}
	msgs, err := st.Read(testCtx(t), topic, q, 0, int(max), 0)
	require.NoError(t, err)
	return msgs
}

func TestCommitDeliversOnce(t *testing.T) {
	e := openEnv(t, t.TempDir(), nil, nil)
	p, err := e.m.Prepare(testCtx(t), txMsg("m1", "orders", 2))
	require.NoError(t, err)
	require.Len(t, p.TransactionID, 32)
	require.Empty(t, readTopic(t, e.st, "orders", 2), "a half message is invisible")
	require.Equal(t, 1, e.m.Pending())

	require.NoError(t, e.m.End(testCtx(t), p.TransactionID, "m1", "orders", Commit))
	got := readTopic(t, e.st, "orders", 2)
	require.Len(t, got, 1)
	require.Equal(t, []byte("body m1"), got[0].Body)
	require.Equal(t, FlagCommit, got[0].Flags&(FlagCommit|FlagPrepared))
	require.Equal(t, map[string]string{"UNIQ_KEY": "m1", "TRAN_MSG": "true", "user": "u", PropProducerGroup: "orders"}, got[0].Properties)
	require.Zero(t, e.m.Pending())

	// Resolved once: a repeated commit or a late rollback changes nothing.
	require.ErrorIs(t, e.m.End(testCtx(t), p.TransactionID, "m1", "orders", Commit), ErrResolved)
	require.ErrorIs(t, e.m.End(testCtx(t), p.TransactionID, "m1", "orders", Rollback), ErrResolved)
	require.ErrorIs(t, e.m.End(testCtx(t), p.TransactionID, "m9", "orders", Commit), ErrInvalidTransactionID)
	require.ErrorIs(t, e.m.End(testCtx(t), p.TransactionID, "m1", "other", Commit), ErrInvalidTransactionID)
	require.Len(t, readTopic(t, e.st, "orders", 2), 1)
}

func TestRollbackNeverDelivers(t *testing.T) {
	e := openEnv(t, t.TempDir(), nil, nil)
	p, err := e.m.Prepare(testCtx(t), txMsg("m1", "orders", 0))
	require.NoError(t, err)
	require.NoError(t, e.m.End(testCtx(t), p.TransactionID, "m1", "orders", Rollback))
	require.ErrorIs(t, e.m.End(testCtx(t), p.TransactionID, "m1", "orders", Commit), ErrResolved)
	require.Empty(t, readTopic(t, e.st, "orders", 0))
	require.Zero(t, e.m.Pending())
}

func TestEndRejectsBadIDs(t *testing.T) {
	e := openEnv(t, t.TempDir(), nil, nil)
	p, err := e.m.Prepare(testCtx(t), txMsg("m1", "orders", 0))
	require.NoError(t, err)
	for _, tc := range []struct{ id, msg, topic string }{
		{"", "m1", "orders"},
		{"garbage", "m1", "orders"},
		{p.TransactionID[:16] + "0000000000000000", "m1", "orders"}, // right offset, wrong nonce
		{"00000000000000FF" + p.TransactionID[16:], "m1", "orders"}, // no such offset
		{p.TransactionID, "m2", "orders"},
		{p.TransactionID, "m1", "other"},
	} {
		err := e.m.End(testCtx(t), tc.id, tc.msg, tc.topic, Commit)
		require.ErrorIs(t, err, ErrInvalidTransactionID, "%+v", tc)
	}
	// Unknown keeps it pending.
	require.NoError(t, e.m.End(testCtx(t), p.TransactionID, "m1", "orders", Unknown))
	require.Equal(t, 1, e.m.Pending())
	_, err = e.m.Prepare(testCtx(t), txMsg("m1", "", 0))
	require.ErrorIs(t, err, ErrInvalidMessage)
}

// TestOrphanCheckedBackAndResolved: a transaction nobody ends is checked
// back after Timeout; the answer of the check commits it.
func TestOrphanCheckedBackAndResolved(t *testing.T) {
	var e *env
	c := &checker{}
	c.answer = func(cc checkCall) {
		if c.count() < 2 {
			return // the first check goes unanswered (a dead producer)
		}
		if err := e.m.End(context.Background(), cc.txID, cc.msg.Properties["UNIQ_KEY"], cc.msg.Topic, Commit); err != nil {
			t.Errorf("end from check-back: %v", err)
		}
	}
	e = openEnv(t, t.TempDir(), c, func(o *Options) {
		o.Timeout = 50 * time.Millisecond
		o.CheckInterval = 50 * time.Millisecond
	})
	p, err := e.m.Prepare(testCtx(t), txMsg("m1", "orders", 1))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.m.Pending() == 0 }, 10*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, c.count(), 2)
	c.mu.Lock()
	first := c.calls[0]
	c.mu.Unlock()
	require.Equal(t, "orders", first.group)
	require.Equal(t, p.TransactionID, first.txID)
	require.Equal(t, "orders", first.msg.Topic)
	require.EqualValues(t, 1, first.msg.QueueID)
	require.Equal(t, "m1", first.msg.Properties["UNIQ_KEY"])
	require.Len(t, readTopic(t, e.st, "orders", 1), 1)
}

// TestRecoveryDurationDelaysFirstCheck: the message's own recovery duration
// (CHECK_IMMUNITY_TIME_IN_SECONDS) postpones its first check past Timeout.
func TestRecoveryDurationDelaysFirstCheck(t *testing.T) {
	c := &checker{}
	e := openEnv(t, t.TempDir(), c, func(o *Options) {
		o.Timeout = 10 * time.Millisecond
		o.CheckInterval = 10 * time.Millisecond
	})
	m := txMsg("m1", "orders", 0)
	m.Properties[PropRecovery] = "1"
	start := time.Now()
	_, err := e.m.Prepare(testCtx(t), m)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.count() > 0 }, 10*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond)
}

// TestMaxChecksDiscards: an orphan out of checks goes to CheckMaxTopic and
// is never delivered.
func TestMaxChecksDiscards(t *testing.T) {
	c := &checker{}
	e := openEnv(t, t.TempDir(), c, func(o *Options) {
		o.Timeout = 5 * time.Millisecond
		o.CheckInterval = 5 * time.Millisecond
		o.MaxChecks = 3
	})
	p, err := e.m.Prepare(testCtx(t), txMsg("m1", "orders", 0))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.m.Pending() == 0 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 3, c.count())
	require.Len(t, readTopic(t, e.st, CheckMaxTopic, 0), 1)
	require.Empty(t, readTopic(t, e.st, "orders", 0))
	require.ErrorIs(t, e.m.End(testCtx(t), p.TransactionID, "m1", "orders", Commit), ErrResolved)
}

// TestRestartRebuildsPending: after a restart, resolved transactions stay
// resolved, pending ones are pending under the same ids with their check
// counts, and can be committed.
func TestRestartRebuildsPending(t *testing.T) {
	dir := t.TempDir()
	c := &checker{}
	e := openEnv(t, dir, c, nil)
	var ids []Prepared
	for i := range 4 {
		p, err := e.m.Prepare(testCtx(t), txMsg(fmt.Sprint("m", i), "orders", 0))
		require.NoError(t, err)
		ids = append(ids, p)
	}
	require.NoError(t, e.m.End(testCtx(t), ids[0].TransactionID, "", "", Commit))
	require.NoError(t, e.m.End(testCtx(t), ids[1].TransactionID, "", "", Rollback))
	// Two checks of m2 already happened.
	require.NoError(t, e.m.writeOp(testCtx(t), ids[2].HalfOffset, "check", 1))
	require.NoError(t, e.m.writeOp(testCtx(t), ids[2].HalfOffset, "check", 2))
	e.close()

	e2 := openEnv(t, dir, c, func(o *Options) {
		o.Timeout = 5 * time.Millisecond
		o.CheckInterval = 5 * time.Millisecond
		o.MaxChecks = 3
	})
	// m2 has one check left, m3 three: m2 is discarded first.
	require.Eventually(t, func() bool { return e2.m.Pending() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, e2.m.End(testCtx(t), ids[3].TransactionID, "m3", "orders", Commit))
	require.ErrorIs(t, e2.m.End(testCtx(t), ids[0].TransactionID, "", "", Commit), ErrResolved)
	require.ErrorIs(t, e2.m.End(testCtx(t), ids[2].TransactionID, "", "", Commit), ErrResolved)
	got := readTopic(t, e2.st, "orders", 0)
	require.Len(t, got, 2)
	require.Equal(t, "m0", got[0].Properties["UNIQ_KEY"])
	require.Equal(t, "m3", got[1].Properties["UNIQ_KEY"])
	require.Len(t, readTopic(t, e2.st, CheckMaxTopic, 0), 1)
}

func TestOptionsValidated(t *testing.T) {
	_, err := Open(context.Background(), Options{})
	require.ErrorIs(t, err, ErrInvalidOptions)
}

// TestLatePrepareCheckedOnTime: a transaction prepared while the check loop
// sleeps towards a later check is still checked after Timeout, not at that
// later time.
func TestLatePrepareCheckedOnTime(t *testing.T) {
	c := &checker{}
	e := openEnv(t, t.TempDir(), c, func(o *Options) {
		o.Timeout = 50 * time.Millisecond
		o.CheckInterval = time.Hour
	})
	_, err := e.m.Prepare(testCtx(t), txMsg("first", "orders", 0))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.count() == 1 }, 10*time.Second, time.Millisecond)
	// The loop now sleeps towards the first one's next check, an hour away.
	_, err = e.m.Prepare(testCtx(t), txMsg("second", "orders", 0))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.count() == 2 }, 10*time.Second, time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, "second", c.calls[1].msg.Properties["UNIQ_KEY"])
}
