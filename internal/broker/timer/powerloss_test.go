package timer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store"
	"github.com/twinmq/twinmq/internal/store/vfs"
)

// The store flushes asynchronously (the broker's default), so a power loss
// may take back a scheduled message that the timer had already logged and
// checkpointed (the timer syncs its own files only). After recovery the
// timer log still holds a record for that system-topic offset, and the
// next message scheduled takes the same offset. The timer must not deliver
// that new message at the lost message's time, before its own (it did).
func TestPowerLossDoesNotDeliverAnotherMessageEarly(t *testing.T) {
	r := newPowerLossRig(t, 1)
	sopts, st, clock, tm := r.sopts, r.st, r.clock, r.tm
	start := clock.Now()
	_, err := tm.Schedule(testCtx(t), delayed("lost", "dest", 0), start.Add(time.Second))
	require.NoError(t, err)
	// The timer checkpoints (log synced, enqueue position past the message);
	// the power loss takes everything unsynced, so the store loses the
	// message it never fsynced.
	img := r.powerLossAfterCheckpoint(t, func(cp checkpoint) bool { return cp.enqNext >= 1 })
	require.NoError(t, tm.Close())
	require.NoError(t, st.Close())

	sopts.FS = img
	st2 := openStore(t, sopts)
	defer st2.Close()
	_, max := st2.Offsets(SystemTopic, 0)
	require.Zero(t, max, "the power loss must take the store's unsynced message")
	rec2 := newRecorder(clock, nil)
	tm2 := openTimer(t, st2, img, "/timer", rec2, func(o *Options) { o.Clock = clock })
	defer tm2.Close()

	// A new message, due in 10 s, takes the freed offset 0.
	sc, err := tm2.Schedule(testCtx(t), delayed("new", "dest", 0), start.Add(10*time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 0, sc.Offset)

	for range 30 { // 3 s: past the lost message's time, far before the new one's
		clock.Advance(100 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	for _, d := range rec2.snapshot() {
		require.GreaterOrEqual(t, d.when.UnixMilli(), d.at,
			"message %q (due %s) delivered at %s: %s early", d.id, time.UnixMilli(d.at).Sub(start), d.when.Sub(start),
			time.Duration(d.at-d.when.UnixMilli())*time.Millisecond)
	}
}

// The same power loss, but the lost message had already been delivered
// (its record is behind the checkpointed cursor). The checkpoint's enqueue
// position (1) is past the store's recovered end (0); the first message
// scheduled after the restart (offset 0) used to be never enqueued:
// Schedule succeeded and the message was never delivered.
func TestPowerLossDoesNotDropLaterMessages(t *testing.T) {
	r := newPowerLossRig(t, 2)
	sopts, st, clock, rec, tm := r.sopts, r.st, r.clock, r.rec, r.tm
	first := clock.Now().Add(50 * time.Millisecond)
	_, err := tm.Schedule(testCtx(t), delayed("first", "dest", 0), first)
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "first delivery", func() bool {
		clock.Advance(10 * time.Millisecond)
		return rec.count() == 1
	})
	// Checkpoint: cursor and enqueue position past it.
	img := r.powerLossAfterCheckpoint(t, func(cp checkpoint) bool { return cp.enqNext >= 1 && cp.cursor > first.UnixMilli() })
	require.NoError(t, tm.Close())
	require.NoError(t, st.Close())

	sopts.FS = img
	st2 := openStore(t, sopts)
	defer st2.Close()
	_, max := st2.Offsets(SystemTopic, 0)
	require.Zero(t, max, "the power loss must take the store's unsynced message")
	rec2 := newRecorder(clock, nil)
	tm2 := openTimer(t, st2, img, "/timer", rec2, func(o *Options) { o.Clock = clock })
	defer tm2.Close()

	at := clock.Now().Add(500 * time.Millisecond)
	_, err = tm2.Schedule(testCtx(t), delayed("after-restart", "dest", 0), at)
	require.NoError(t, err)
	for range 20 {
		clock.Advance(100 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for rec2.count() == 0 && time.Now().Before(deadline) {
		clock.Advance(10 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, 1, rec2.count(), "a message scheduled after the restart (due %s ago) was never delivered; pending in wheel: %d",
		clock.Now().Sub(at), tm2.Stats().Pending)
}

// A power loss after the timer's last checkpoint (at Close) keeps what it
// recorded: a
// message delivered before it is not delivered again, one still pending is
// delivered once, at its time. The checkpoint's rename used to be left
// unsynced: a power loss kept no checkpoint, and the timer handed out
// every message of its system topic again.
func TestPowerLossKeepsTheCheckpoint(t *testing.T) {
	r := newPowerLossRig(t, 3)
	sopts, st, clock, rec, tm := r.sopts, r.st, r.clock, r.rec, r.tm
	start := clock.Now()
	for i := range 3 {
		_, err := tm.Schedule(testCtx(t), delayed(fmt.Sprint("early", i), "dest", 0), start.Add(50*time.Millisecond))
		require.NoError(t, err)
	}
	_, err := tm.Schedule(testCtx(t), delayed("late", "dest", 0), start.Add(10*time.Second))
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "the early deliveries", func() bool {
		clock.Advance(10 * time.Millisecond)
		return rec.count() == 3
	})
	require.NoError(t, st.Flush(testCtx(t))) // the store keeps every scheduled message
	require.NoError(t, tm.Close())           // its final checkpoint
	img := r.fs.SyncedClone()
	require.NoError(t, st.Close())

	sopts.FS = img
	st2 := openStore(t, sopts)
	defer st2.Close()
	_, max := st2.Offsets(SystemTopic, 0)
	require.EqualValues(t, 4, max)
	rec2 := newRecorder(clock, nil)
	tm2 := openTimer(t, st2, img, "/timer", rec2, func(o *Options) { o.Clock = clock })
	defer tm2.Close()
	waitFor(t, 5*time.Second, "the late delivery", func() bool {
		clock.Advance(100 * time.Millisecond)
		return rec2.count() >= 1
	})
	time.Sleep(50 * time.Millisecond)
	got := rec2.snapshot()
	require.Len(t, got, 1, "delivered after the power loss: %v", got)
	require.Equal(t, "late", got[0].id)
	require.GreaterOrEqual(t, got[0].when.UnixMilli(), got[0].at)
}

// powerLossRig is a timer over a store that never flushes on its own (an
// hour apart), on a strict file system that can be cloned as a power loss
// leaves it, with a fake clock and a timer that checkpoints every 2 ms.
type powerLossRig struct {
	fs    *vfs.MemFS
	sopts store.Options
	st    *store.Store
	clock *fakeClock
	rec   *recorder
	tm    *Timer
}

func newPowerLossRig(t *testing.T, seed uint64) powerLossRig {
	fs := vfs.NewMem(seed, vfs.Strict())
	sopts := store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10,
		FlushInterval: time.Hour, CheckpointInterval: time.Hour}
	st := openStore(t, sopts)
	clock := newFakeClock(time.UnixMilli(1_700_000_000_000))
	rec := newRecorder(clock, nil)
	mod := func(o *Options) { o.Clock = clock; o.CheckpointInterval = 2 * time.Millisecond }
	return powerLossRig{fs: fs, sopts: sopts, st: st, clock: clock, rec: rec, tm: openTimer(t, st, fs, "/timer", rec, mod)}
}

// powerLossAfterCheckpoint waits until a power loss would keep a timer
// checkpoint that satisfies ok, and returns that power-loss image: only
// what was synced, file data and directory names alike (a strict file
// system), so the store loses every append it did not fsync.
func (r powerLossRig) powerLossAfterCheckpoint(t *testing.T, ok func(checkpoint) bool) *vfs.MemFS {
	t.Helper()
	var img *vfs.MemFS
	waitFor(t, 5*time.Second, "a durable timer checkpoint", func() bool {
		img = r.fs.SyncedClone()
		cp, found, err := readCheckpoint(img, "/timer")
		require.NoError(t, err)
		return found && ok(cp)
	})
	return img
}

// A read that fails while the timer reads its log back fails Open: the
// zeroed buffer used to be taken for a torn tail, the segment was cut to
// nothing and its pending messages were never delivered.
func TestLogReadFaultFailsOpen(t *testing.T) {
	fs := vfs.NewMem(6, vfs.Strict())
	sopts := store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10}
	st := openStore(t, sopts)
	defer st.Close()
	clock := newFakeClock(time.UnixMilli(1_700_000_000_000))
	tm := openTimer(t, st, fs, "/timer", newRecorder(clock, nil), func(o *Options) { o.Clock = clock })
	for i := range 3 {
		_, err := tm.Schedule(testCtx(t), delayed(fmt.Sprint("m", i), "dest", 0), clock.Now().Add(time.Minute))
		require.NoError(t, err)
	}
	require.NoError(t, tm.Close())

	boom := errors.New("injected read fault")
	fs.ReadFault = func(name string, _ int64, _ int) error {
		if strings.HasSuffix(name, logSuffix) {
			return boom
		}
		return nil
	}
	_, err := Open(testCtx(t), Options{Dir: "/timer", FS: fs, Store: st, Deliverer: newRecorder(clock, nil), Clock: clock})
	require.ErrorIs(t, err, boom)
	fs.ReadFault = nil

	rec := newRecorder(clock, nil)
	tm = openTimer(t, st, fs, "/timer", rec, func(o *Options) { o.Clock = clock })
	defer tm.Close()
	waitFor(t, 5*time.Second, "the three deliveries", func() bool {
		clock.Advance(time.Second)
		return rec.distinct() == 3
	})
}

// Over a sync-flush store, an append that no fsync confirmed is no
// acceptance: Schedule says so (store.ErrNotDurable), and a power loss may
// take the message back. Schedule used to wait for the timer's tail, which
// never sees a message before an fsync covers it, until ctx ended, and
// then return nil: an acknowledged message was lost (the crash test's rare
// "missing" message, when its crash point came between the store's write
// and its fsync).
func TestScheduleNotDurableIsNotAcknowledged(t *testing.T) {
	fs := vfs.NewMem(7, vfs.Strict())
	var failSync atomic.Bool
	boom := errors.New("injected fsync fault")
	fs.SyncFault = func(name string) error {
		if failSync.Load() && strings.HasPrefix(name, "/s/commitlog/") {
			return boom
		}
		return nil
	}
	sopts := store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10,
		Flush: store.FlushSync}
	st := openStore(t, sopts)
	clock := newFakeClock(time.UnixMilli(1_700_000_000_000))
	tm := openTimer(t, st, fs, "/timer", newRecorder(clock, nil), func(o *Options) { o.Clock = clock })
	at := clock.Now().Add(time.Second)
	_, err := tm.Schedule(testCtx(t), delayed("kept", "dest", 0), at)
	require.NoError(t, err)

	failSync.Store(true)
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	sc, err := tm.Schedule(ctx, delayed("unsure", "dest", 0), at)
	cancel()
	require.ErrorIs(t, err, store.ErrNotDurable, "a message no fsync confirmed was acknowledged")
	require.ErrorIs(t, err, boom)
	require.EqualValues(t, 1, sc.Offset)

	img := fs.SyncedClone() // the power loss takes the unsynced append
	_ = tm.Close()
	_ = st.Close() // failed since the fsync fault
	sopts.FS = img
	st2 := openStore(t, sopts)
	defer st2.Close()
	_, end := st2.Offsets(SystemTopic, 0)
	require.EqualValues(t, 1, end, "the power loss must take the unconfirmed message")
	rec2 := newRecorder(clock, nil)
	tm2 := openTimer(t, st2, img, "/timer", rec2, func(o *Options) { o.Clock = clock })
	defer tm2.Close()
	waitFor(t, 5*time.Second, "the acknowledged message", func() bool {
		clock.Advance(100 * time.Millisecond)
		return rec2.count() >= 1
	})
	got := rec2.snapshot()
	require.Len(t, got, 1)
	require.Equal(t, "kept", got[0].id)
}

// TestRollOverNotDurableIsRetried: the re-append that carries a long delay
// across the roll window is the entry's only copy from then on, so one no
// fsync confirmed must not count as done. It used to: the checkpoint moved
// past the entry, and a power loss took the unsynced copy and the message
// with it.
func TestRollOverNotDurableIsRetried(t *testing.T) {
	fs := vfs.NewMem(11, vfs.Strict())
	var failSync atomic.Bool
	fs.SyncFault = func(name string) error {
		if failSync.Load() && strings.HasPrefix(name, "/s/commitlog/") {
			return errors.New("injected fsync fault")
		}
		return nil
	}
	sopts := store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10,
		Flush: store.FlushSync}
	st := openStore(t, sopts)
	clock := newFakeClock(time.UnixMilli(1_700_000_000_000))
	opts := func(o *Options) {
		o.Clock = clock
		o.RollWindow = time.Second
		o.MaxDelay = 10 * time.Second
		o.CheckpointInterval = 5 * time.Millisecond
	}
	tm := openTimer(t, st, fs, "/timer", newRecorder(clock, nil), opts)
	at := clock.Now().Add(3500 * time.Millisecond)
	_, err := tm.Schedule(testCtx(t), delayed("long", "dest", 1), at)
	require.NoError(t, err)

	// Every fsync of the log fails from now on, while the entry reaches the
	// window edge and is re-appended (not durably), and the timer saves
	// its checkpoint.
	failSync.Store(true)
	for range 60 {
		clock.Advance(25 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	img := fs.SyncedClone()
	_ = tm.Close()
	_ = st.Close()

	sopts.FS = img
	st2 := openStore(t, sopts)
	defer st2.Close()
	rec2 := newRecorder(clock, nil)
	tm2 := openTimer(t, st2, img, "/timer", rec2, opts)
	defer tm2.Close()
	waitFor(t, 10*time.Second, "the long-delayed message after the power loss", func() bool {
		clock.Advance(25 * time.Millisecond)
		return rec2.count() >= 1
	})
	require.Equal(t, "long", rec2.snapshot()[0].id)
}
