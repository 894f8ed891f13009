package txn

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store"
	"github.com/twinmq/twinmq/internal/store/vfs"
)

// openMemEnv opens a store that acknowledges only fsynced appends, on fs,
// and a manager over it.
func openMemEnv(t *testing.T, fs *vfs.MemFS) (*store.Store, *Manager) {
	t.Helper()
	st, err := store.Open(testCtx(t), store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize,
		MaxMessageSize: 64 << 10, Flush: store.FlushSync})
	require.NoError(t, err)
	m, err := Open(testCtx(t), Options{Store: st, Deliverer: appender{st}, Checker: &checker{},
		Timeout: time.Hour, CheckInterval: time.Hour})
	require.NoError(t, err)
	return st, m
}

// TestPowerLossKeepsAcknowledgedTransactions prepares and ends transactions
// until a crash at a random file operation (a write, truncation, rename or
// removal, torn or not) stops the store, takes a power-loss image of a
// strict file system (a random part of what was not synced is lost, names
// included) and reopens it: a transaction whose End was acknowledged stays
// resolved, a committed one is in its topic and a rolled-back one is not;
// one whose Prepare was acknowledged is still there, pending or resolved
// by an End that was under way; no message that was never committed shows.
func TestPowerLossKeepsAcknowledgedTransactions(t *testing.T) {
	crashes, acked, ended := 0, 0, 0
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		fs := vfs.NewMem(seed, vfs.Strict())
		st, m := openMemEnv(t, fs)
		prepared := map[string]Prepared{}
		resolved := map[string]Resolution{}
		committing := map[string]bool{} // a commit was attempted
		var open []string
		fs.CrashAtWrite(int64(1 + rng.IntN(60)))
		for i := 0; i < 40; i++ {
			if len(open) > 0 && rng.IntN(2) == 0 {
				k := rng.IntN(len(open))
				id := open[k]
				open = append(open[:k], open[k+1:]...)
				r := Commit
				if rng.IntN(3) == 0 {
					r = Rollback
				}
				if r == Commit {
					committing[id] = true
				}
				if err := m.End(testCtx(t), prepared[id].TransactionID, id, "orders", r); err != nil {
					break
				}
				resolved[id] = r
				continue
			}
			id := fmt.Sprintf("s%d-m%d", seed, i)
			p, err := m.Prepare(testCtx(t), txMsg(id, "orders", 0))
			if err != nil {
				break
			}
			prepared[id] = p
			open = append(open, id)
		}
		if fs.Crashed() {
			crashes++
		}
		_ = m.Close()
		_ = st.Close()
		fs.CrashAtWrite(0)
		acked += len(prepared)
		ended += len(resolved)

		label := fmt.Sprintf("seed %d", seed)
		st2, m2 := openMemEnv(t, fs.CrashClone(false))
		for id, p := range prepared {
			err := m2.End(testCtx(t), p.TransactionID, id, "orders", Commit)
			if _, ok := resolved[id]; ok {
				require.ErrorIs(t, err, ErrResolved, "%s: %s was resolved before the power loss", label, id)
				continue
			}
			if err == nil {
				committing[id] = true
				continue
			}
			require.ErrorIs(t, err, ErrResolved, "%s: the prepared %s is gone", label, id)
		}
		got := map[string]int{}
		for _, sm := range readTopic(t, st2, "orders", 0) {
			got[sm.Properties["UNIQ_KEY"]]++
		}
		for id, n := range got {
			require.True(t, committing[id], "%s: %s shows but was never committed", label, id)
			require.LessOrEqual(t, n, 2, "%s: %s delivered %d times", label, id, n) // at least once: a redo after a crash
		}
		for id, r := range resolved {
			if r == Commit {
				require.Positive(t, got[id], "%s: the committed %s is not in its topic", label, id)
			} else {
				require.Zero(t, got[id], "%s: the rolled-back %s is in its topic", label, id)
			}
		}
		require.NoError(t, m2.Close())
		require.NoError(t, st2.Close())
	}
	t.Logf("%d crashes, %d prepares and %d ends acknowledged", crashes, acked, ended)
	require.GreaterOrEqual(t, crashes, 30, "too few runs reached their crash point")
	require.Positive(t, ended)
}
