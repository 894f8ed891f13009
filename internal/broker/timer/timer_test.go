package timer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store"
	"github.com/twinmq/twinmq/internal/store/vfs"
)

func openTimer(t testing.TB, st *store.Store, fs store.FS, dir string, d Deliverer, mod func(*Options)) *Timer {
	t.Helper()
	o := Options{Dir: dir, FS: fs, Store: st, Deliverer: d}
	if mod != nil {
		mod(&o)
	}
	tm, err := Open(testCtx(t), o)
	require.NoError(t, err)
	return tm
}

// TestDeliversAtTimeWithFakeClock: with a manual clock, nothing goes out
// before its time and everything goes out within one slot after it, across
// several wheel revolutions.
func TestDeliversAtTimeWithFakeClock(t *testing.T) {
	fs := vfs.NewMem(1, vfs.Strict())
	st := openStore(t, store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10})
	defer st.Close()
	clock := newFakeClock(time.UnixMilli(1_700_000_000_000))
	rec := newRecorder(clock, nil)
	tm := openTimer(t, st, fs, "/timer", rec, func(o *Options) { o.Clock = clock; o.Slots = 64 })
	defer tm.Close()

	rng := rand.New(rand.NewPCG(7, 7))
	start := clock.Now()
	want := map[string]int64{}
	for i := range 300 {
		at := start.Add(time.Duration(rng.Int64N(int64(5 * time.Second))))
		if i%50 == 0 {
			at = start.Add(-time.Second) // in the past: at once
		}
		id := fmt.Sprint("m", i)
		sc, err := tm.Schedule(testCtx(t), delayed(id, "dest", int32(i%4)), at)
		require.NoError(t, err)
		require.Equal(t, at.UnixMilli(), sc.At)
		want[id] = at.UnixMilli()
	}
	// Only the messages due at once (6 of them) may have left the wheel
	// already.
	require.GreaterOrEqual(t, tm.Stats().Pending, 300-6)
	for step := 0; clock.Now().Before(start.Add(6 * time.Second)); step++ {
		now := clock.Now().UnixMilli()
		// Everything due one slot ago must have gone out.
		n := 0
		for _, at := range want {
			// A past time is moved up to the cursor's slot (about start).
			if max(at, start.UnixMilli()) <= now-10 {
				n++
			}
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("%d deliveries by %d", n, now), func() bool { return rec.count() >= n })
		for _, d := range rec.snapshot() {
			require.GreaterOrEqual(t, d.when.UnixMilli(), d.at, "%s delivered early", d.id)
			require.Equal(t, want[d.id], d.at)
		}
		// The timer arms its wake-up for a duration from the time it read:
		// a step taken between that read and the arming (a loaded machine)
		// would set it late by the step, past what the next step waits
		// for. Step only once it is armed (or nothing is left).
		waitFor(t, 10*time.Second, "the timer's wake-up armed", func() bool { return clock.armed() > 0 || rec.count() == 300 })
		clock.Advance(time.Duration(rng.IntN(37)) * time.Millisecond)
	}
	waitFor(t, 10*time.Second, "all deliveries", func() bool { return rec.count() == 300 })
	require.Zero(t, rec.dups())
	require.Equal(t, 300, rec.distinct())
	for _, d := range rec.snapshot() {
		require.Equal(t, "dest", d.topic)
		require.LessOrEqual(t, d.when.UnixMilli(), max(d.at, start.UnixMilli())+10+37, "%s late beyond a slot and a step", d.id)
	}
	require.Zero(t, tm.Stats().Pending)
}

// TestRestartMidWait closes the timer and the store while messages wait,
// reopens both on the same directory, and checks that every message is
// delivered exactly once and none early.
func TestRestartMidWait(t *testing.T) {
	dir := t.TempDir()
	sopts := store.Options{Dir: filepath.Join(dir, "store")}
	st := openStore(t, sopts)
	rec := newRecorder(RealClock(), nil)
	tm := openTimer(t, st, nil, filepath.Join(dir, "timer"), rec, nil)
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 400
	for i := range n {
		at := now.Add(time.Duration(rng.Int64N(int64(2500 * time.Millisecond))))
		_, err := tm.Schedule(testCtx(t), delayed(fmt.Sprint("r", i), "dest", 0), at)
		require.NoError(t, err)
	}
	time.Sleep(800 * time.Millisecond)
	require.NoError(t, tm.Close())
	require.NoError(t, st.Close())
	before := rec.count()
	t.Logf("delivered before the restart: %d of %d", before, n)
	time.Sleep(300 * time.Millisecond) // some fall due while the broker is down

	st = openStore(t, sopts)
	defer st.Close()
	tm = openTimer(t, st, nil, filepath.Join(dir, "timer"), rec, nil)
	defer tm.Close()
	waitFor(t, 20*time.Second, "all deliveries", func() bool { return rec.distinct() == n })
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, rec.dups(), "a clean restart repeats nothing")
	for _, d := range rec.snapshot() {
		require.GreaterOrEqual(t, d.when.UnixMilli(), d.at, "%s delivered early", d.id)
	}
}

// TestCrashRecoveryLosesNothing crashes at several points and recovers on
// a clone of the (strict) file system: every message scheduled before the
// crash is delivered, none early. A process crash keeps every write and
// nothing is closed. A power loss keeps what was synced and a random part
// of the rest, over a store that acknowledges only fsynced appends; in the
// "crash" runs it comes at a random file operation of the store or the
// timer (a torn write, a truncation, a rename), which stops both.
func TestCrashRecoveryLosesNothing(t *testing.T) {
	crashed := 0
	for _, mode := range []string{"process", "power", "crash"} {
		seeds := uint64(4)
		if mode == "crash" {
			seeds = 24
		}
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprint(mode, "/seed=", seed), func(t *testing.T) {
				if runCrashRecovery(t, seed, mode) {
					crashed++
				}
			})
		}
	}
	t.Logf("%d runs crashed at their crash point", crashed)
	require.GreaterOrEqual(t, crashed, 20, "too few runs reached their crash point")
}

func runCrashRecovery(t *testing.T, seed uint64, mode string) (crashed bool) {
	rng := rand.New(rand.NewPCG(seed, 99))
	fs := vfs.NewMem(seed, vfs.Strict())
	sopts := store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10}
	if mode != "process" {
		sopts.Flush = store.FlushSync
	}
	st := openStore(t, sopts)
	clock := newFakeClock(time.UnixMilli(1_700_000_000_000))
	rec := newRecorder(clock, nil)
	tm := openTimer(t, st, fs, "/timer", rec, func(o *Options) {
		o.Clock = clock
		o.Slots = 32
		o.SegmentRecords = 16
		o.CheckpointInterval = 5 * time.Millisecond
	})
	start := clock.Now()
	want := map[string]int64{}      // acknowledged
	attempted := map[string]int64{} // acknowledged or not
	if mode == "crash" {
		fs.CrashAtWrite(int64(1 + rng.IntN(250)))
	}
	for i := range 120 {
		at := start.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		id := fmt.Sprint("c", i)
		attempted[id] = at.UnixMilli()
		// A Schedule whose message is stored waits for the timer's log; on
		// a crashed disk that never comes, and it returns when ctx ends.
		// Without a crash nothing needs the bound (a loaded machine may
		// take long over a group commit, which the bound would make a
		// "not durable" error).
		ctx, cancel := testCtx(t), func() {}
		if mode == "crash" {
			ctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
		}
		_, err := tm.Schedule(ctx, delayed(id, "dest", 0), at)
		cancel()
		if mode == "crash" && err != nil {
			// Refused, or stored but not confirmed durable (the crash
			// came between the store's write and its fsync): not
			// acknowledged, a power loss may take it back.
			break
		}
		require.NoError(t, err)
		want[id] = at.UnixMilli()
		if rng.IntN(4) == 0 {
			clock.Advance(time.Duration(rng.IntN(80)) * time.Millisecond)
			time.Sleep(time.Millisecond)
		}
	}
	clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	crashed = fs.Crashed()
	img := fs.CrashClone(mode == "process")
	rec.stop()
	delivered := map[string]bool{}
	for _, d := range rec.snapshot() {
		delivered[d.id] = true
	}
	if crashed {
		_ = tm.Close() // both fail on the crashed file system
		_ = st.Close()
	} else {
		require.NoError(t, tm.Close())
		require.NoError(t, st.Close())
	}

	sopts.FS = img
	st2 := openStore(t, sopts)
	defer st2.Close()
	rec2 := newRecorder(clock, nil)
	tm2 := openTimer(t, st2, img, "/timer", rec2, func(o *Options) { o.Clock = clock; o.Slots = 32; o.SegmentRecords = 16 })
	defer tm2.Close()
	time.Sleep(20 * time.Millisecond)
	clock.Advance(4 * time.Second)
	// The recovered timer may arm its next wake-up only after that jump
	// (a loaded machine runs its goroutine late), and a fake clock fires a
	// timer only when advanced: keep time moving while waiting.
	deadline := time.Now().Add(10 * time.Second)
	for {
		clock.Advance(10 * time.Millisecond)
		var missing []string
		for id := range want {
			if !delivered[id] && rec2.byIDCount(id) == 0 {
				missing = append(missing, fmt.Sprint(id, "@", want[id]-start.UnixMilli()))
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for recovered deliveries: missing %v (crashed %v at %v, clock +%v, %d delivered before, %d after)",
				missing, crashed, fs.CrashedOp(), clock.Now().Sub(start), len(delivered), len(rec2.snapshot()))
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, d := range rec2.snapshot() {
		require.GreaterOrEqual(t, d.when.UnixMilli(), d.at, "%s delivered early", d.id)
		require.Equal(t, attempted[d.id], d.at)
	}
	return crashed
}

func (r *recorder) byIDCount(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// TestRollOver: a delay beyond the roll window is re-enqueued at the window
// edge, as often as needed, and still goes out at its time.
func TestRollOver(t *testing.T) {
	fs := vfs.NewMem(3, vfs.Strict())
	st := openStore(t, store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10})
	defer st.Close()
	clock := newFakeClock(time.UnixMilli(1_700_000_000_000))
	rec := newRecorder(clock, nil)
	tm := openTimer(t, st, fs, "/timer", rec, func(o *Options) {
		o.Clock = clock
		o.RollWindow = time.Second
		o.MaxDelay = 10 * time.Second
	})
	defer tm.Close()
	at := clock.Now().Add(3500 * time.Millisecond)
	_, err := tm.Schedule(testCtx(t), delayed("long", "dest", 1), at)
	require.NoError(t, err)
	for clock.Now().Before(at.Add(20 * time.Millisecond)) {
		clock.Advance(25 * time.Millisecond)
		time.Sleep(time.Millisecond)
		if clock.Now().Before(at) {
			require.Zero(t, rec.count(), "delivered before its time")
		}
	}
	waitFor(t, 5*time.Second, "delivery", func() bool { return rec.count() == 1 })
	require.GreaterOrEqual(t, tm.Stats().Rolled, int64(3))
	d := rec.snapshot()[0]
	require.Equal(t, at.UnixMilli(), d.at)
	require.Equal(t, int32(1), d.queue)
	require.GreaterOrEqual(t, d.when.UnixMilli(), d.at)
}

func TestScheduleRejects(t *testing.T) {
	fs := vfs.NewMem(4, vfs.Strict())
	st := openStore(t, store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10})
	defer st.Close()
	tm := openTimer(t, st, fs, "/timer", newRecorder(RealClock(), nil), func(o *Options) { o.MaxDelay = time.Hour })
	_, err := tm.Schedule(testCtx(t), delayed("x", "dest", 0), time.Now().Add(2*time.Hour))
	require.ErrorIs(t, err, ErrDelayTooLong)
	_, err = tm.Schedule(testCtx(t), delayed("x", "", 0), time.Now())
	require.ErrorIs(t, err, ErrInvalidMessage)
	_, err = tm.Schedule(testCtx(t), delayed("x", "dest", -1), time.Now())
	require.ErrorIs(t, err, ErrInvalidMessage)
	require.NoError(t, tm.Close())
	_, err = tm.Schedule(testCtx(t), delayed("x", "dest", 0), time.Now())
	require.ErrorIs(t, err, ErrClosed)

	for _, o := range []Options{
		{Dir: "", Store: st, Deliverer: newRecorder(RealClock(), nil)},
		{Dir: "/t", Store: nil, Deliverer: newRecorder(RealClock(), nil)},
		{Dir: "/t", Store: st},
		{Dir: "/t", Store: st, Deliverer: newRecorder(RealClock(), nil), Precision: 500 * time.Microsecond},
		{Dir: "/t", Store: st, Deliverer: newRecorder(RealClock(), nil), Slots: 100},
	} {
		o.FS = fs
		_, err := Open(testCtx(t), o)
		require.ErrorIs(t, err, ErrInvalidOptions)
	}
}

// TestLogSegmentsAreDropped: once the cursor passed every record of a log
// segment, the checkpoint removes it.
func TestLogSegmentsAreDropped(t *testing.T) {
	fs := vfs.NewMem(5, vfs.Strict())
	st := openStore(t, store.Options{Dir: "/s", FS: fs, SegmentSize: store.MinSegmentSize, MaxMessageSize: 64 << 10})
	defer st.Close()
	clock := newFakeClock(time.UnixMilli(1_700_000_000_000))
	rec := newRecorder(clock, nil)
	tm := openTimer(t, st, fs, "/timer", rec, func(o *Options) {
		o.Clock = clock
		o.SegmentRecords = 8
		o.CheckpointInterval = 5 * time.Millisecond
	})
	defer tm.Close()
	for i := range 50 {
		_, err := tm.Schedule(testCtx(t), delayed(fmt.Sprint("d", i), "dest", 0), clock.Now().Add(time.Duration(i)*time.Millisecond))
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, tm.Stats().LogSegments, 7)
	clock.Advance(time.Second)
	waitFor(t, 5*time.Second, "deliveries", func() bool { return rec.count() == 50 })
	waitFor(t, 5*time.Second, "segments dropped", func() bool { return tm.Stats().LogSegments == 1 })
}
