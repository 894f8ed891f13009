package store

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

func bigMsg(topic string, q int32, i, size int) Message {
	body := make([]byte, size)
	for k := range body {
		body[k] = byte(i + k)
	}
	return Message{Topic: topic, QueueID: q, Properties: map[string]string{"i": fmt.Sprint(i)}, Body: body}
}

func TestSegmentRollAndRetentionBySize(t *testing.T) {
	fs := vfs.NewMem(3, vfs.Strict())
	mod := func(o *Options) { o.CheckpointInterval = 5 * time.Millisecond; o.CQFileEntries = 16 }
	s := openMem(t, fs, mod)
	ctx := testCtx(t)
	for i := 0; i < 300; i++ {
		_, err := s.Append(ctx, []Message{bigMsg("R", int32(i%2), i, 10_000)})
		require.NoError(t, err)
	}
	require.NoError(t, s.WaitDispatched(ctx))
	for q := int32(0); q < 2; q++ {
		got := readAll(t, s, "R", q)
		require.Len(t, got, 150)
		for k, m := range got {
			require.Equal(t, fmt.Sprint(2*k+int(q)), m.Properties["i"])
		}
	}
	first, end := s.LogRange()
	require.Equal(t, int64(0), first)
	require.Greater(t, end, int64(2*MinSegmentSize), "the log should span several segments")
	require.NoError(t, s.Close())

	s = openMem(t, fs, func(o *Options) { mod(o); o.RetentionBytes = MinSegmentSize + MinSegmentSize/2 })
	require.Eventually(t, func() bool { min, _ := s.Offsets("R", 0); return min > 0 }, 10*time.Second, 5*time.Millisecond)
	first, _ = s.LogRange()
	require.Greater(t, first, int64(0))
	min, max := s.Offsets("R", 0)
	require.Equal(t, int64(150), max)
	_, err := s.Read(ctx, "R", 0, 0, 1, 0)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	got, err := s.Read(ctx, "R", 0, min, 1, 0)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(2*min), got[0].Properties["i"])
	require.NoError(t, s.Close())

	// The moved min and the next offset survive a restart.
	s = openMem(t, fs, mod)
	defer s.Close()
	min2, max2 := s.Offsets("R", 0)
	require.Equal(t, [2]int64{min, max}, [2]int64{min2, max2})
	res, err := s.Append(ctx, []Message{bigMsg("R", 0, 600, 10)})
	require.NoError(t, err)
	require.Equal(t, int64(150), res.FirstOffset)
}

func TestRetentionByAge(t *testing.T) {
	fs := vfs.NewMem(4, vfs.Strict())
	s := openMem(t, fs, func(o *Options) {
		o.CheckpointInterval = 5 * time.Millisecond
		o.RetentionAge = 50 * time.Millisecond
	})
	defer s.Close()
	ctx := testCtx(t)
	for i := 0; i < 250; i++ {
		_, err := s.Append(ctx, []Message{bigMsg("A", 0, i, 10_000)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { min, _ := s.Offsets("A", 0); return min > 0 }, 10*time.Second, 5*time.Millisecond)
	// The active segment is never deleted.
	_, max := s.Offsets("A", 0)
	got, err := s.Read(ctx, "A", 0, max-1, 1, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestArrivalsWakeLongPoll(t *testing.T) {
	s := openMem(t, vfs.NewMem(5, vfs.Strict()), nil)
	defer s.Close()
	ctx := testCtx(t)
	ch := s.Arrivals("P")
	select {
	case <-ch:
		t.Fatal("arrival before any append")
	default:
	}
	_, err := s.Append(ctx, []Message{msg("P", 0, 0)})
	require.NoError(t, err)
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("no arrival")
	}
	// The entry is visible once the channel fires.
	got, err := s.Read(ctx, "P", 0, 0, 10, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	// One-shot: a fresh channel waits for the next entry.
	ch2 := s.Arrivals("P")
	select {
	case <-ch2:
		t.Fatal("stale arrival")
	default:
	}
	require.Equal(t, []string{"P"}, s.Topics())
	require.Equal(t, []int32{0}, s.Queues("P"))
}

func TestOffsetByTime(t *testing.T) {
	for _, batch := range []bool{false, true} {
		s := openMem(t, vfs.NewMem(6, vfs.Strict()), nil)
		require.NoError(t, s.SetTopicOptions("T", TopicOptions{BatchCQ: batch}))
		ctx := testCtx(t)
		var stamps []int64
		for i := 0; i < 8; i++ {
			res, err := s.Append(ctx, []Message{msg("T", 0, 2*i), msg("T", 0, 2*i+1)})
			require.NoError(t, err)
			stamps = append(stamps, res.StoreTimestamp, res.StoreTimestamp)
			time.Sleep(3 * time.Millisecond)
		}
		require.NoError(t, s.WaitDispatched(ctx))
		for k, ts := range stamps {
			want := int64(0)
			for want < int64(len(stamps)) && stamps[want] < ts {
				want++
			}
			got, err := s.OffsetByTime("T", 0, time.UnixMilli(ts))
			require.NoError(t, err)
			require.Equal(t, want, got, "message %d", k)
		}
		got, err := s.OffsetByTime("T", 0, time.UnixMilli(stamps[len(stamps)-1]+1000))
		require.NoError(t, err)
		require.Equal(t, int64(len(stamps)), got)
		require.NoError(t, s.Close())
	}
}

func TestFailedWriteLosesNothing(t *testing.T) {
	fs := vfs.NewMem(7, vfs.Strict())
	var mu sync.Mutex
	failNext := false
	fs.WriteFault = func(name string, off int64, n int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if failNext && n > 100 {
			failNext = false
			return n / 2, syscall.ENOSPC // half the batch reaches the file
		}
		return n, nil
	}
	s := openMem(t, fs, func(o *Options) { o.Flush = FlushSync })
	ctx := testCtx(t)
	for i := 0; i < 5; i++ {
		_, err := s.Append(ctx, []Message{msg("W", 0, i)})
		require.NoError(t, err)
	}
	mu.Lock()
	failNext = true
	mu.Unlock()
	_, err := s.Append(ctx, []Message{msg("W", 0, 100), msg("W", 0, 101)})
	require.ErrorIs(t, err, syscall.ENOSPC)
	res, err := s.Append(ctx, []Message{msg("W", 0, 5)})
	require.NoError(t, err)
	require.Equal(t, int64(5), res.FirstOffset, "the failed append took no offsets")
	require.NoError(t, s.WaitDispatched(ctx))
	check := func(s *Store) {
		got := readAll(t, s, "W", 0)
		require.Len(t, got, 6)
		for i, m := range got {
			require.Equal(t, fmt.Sprint(i), m.Properties["k"])
		}
	}
	check(s)
	// After a crash that keeps every written byte, the failed batch is
	// still nowhere.
	crashed := fs.CrashClone(true)
	require.NoError(t, s.Close())
	s2 := openMem(t, crashed, nil)
	defer s2.Close()
	check(s2)
}

func TestFailedFsyncStopsAppends(t *testing.T) {
	fs := vfs.NewMem(8, vfs.Strict())
	var mu sync.Mutex
	fail := false
	fs.SyncFault = func(name string) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return syscall.EIO
		}
		return nil
	}
	s := openMem(t, fs, func(o *Options) { o.Flush = FlushSync })
	ctx := testCtx(t)
	_, err := s.Append(ctx, []Message{msg("F", 0, 0)})
	require.NoError(t, err)
	mu.Lock()
	fail = true
	mu.Unlock()
	res, err := s.Append(ctx, []Message{msg("F", 0, 1)})
	require.ErrorIs(t, err, ErrNotDurable)
	require.ErrorIs(t, err, syscall.EIO)
	require.Equal(t, Buffered, res.Durability)
	_, err = s.Append(ctx, []Message{msg("F", 0, 2)})
	require.ErrorIs(t, err, ErrFailed)
	s.Close()
}

func TestCorruptRecordIsNeverReturned(t *testing.T) {
	fs := vfs.NewMem(9, vfs.Strict())
	s := openMem(t, fs, nil)
	ctx := testCtx(t)
	for i := 0; i < 3; i++ {
		_, err := s.Append(ctx, []Message{msg("C", 0, i)})
		require.NoError(t, err)
	}
	require.NoError(t, s.WaitDispatched(ctx))
	got := readAll(t, s, "C", 0)
	require.NoError(t, s.Close())

	// Flip one body byte of the middle record on disk.
	f, err := fs.OpenFile("/data/commitlog/"+segmentName(0), os.O_RDWR, 0)
	require.NoError(t, err)
	at := got[1].LogOffset + int64(got[1].Size) - 1
	b := make([]byte, 1)
	_, err = f.ReadAt(b, at)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, at)
	require.NoError(t, err)
	f.Close()

	s = openMem(t, fs, nil) // clean shutdown: no scan, so the damage is found on read
	defer s.Close()
	_, err = s.Read(ctx, "C", 0, 1, 10, 0)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = s.Read(ctx, "C", 0, 0, 10, 0)
	require.ErrorIs(t, err, ErrCorrupt, "a read spanning the bad record fails rather than skip it")
	ok, err := s.Read(ctx, "C", 0, 2, 10, 0)
	require.NoError(t, err)
	require.Len(t, ok, 1)
}

func TestTornQueueFileIsRebuilt(t *testing.T) {
	fs := vfs.NewMem(10, vfs.Strict())
	s := openMem(t, fs, func(o *Options) { o.CQFileEntries = 4 })
	ctx := testCtx(t)
	for i := 0; i < 10; i++ {
		_, err := s.Append(ctx, []Message{msg("Q", 1, i)})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	// A crash that tore the second queue file in the middle of an entry and
	// lost the checkpoint.
	name := "/data/consumequeue/Q/1/" + segmentName(4)
	f, err := fs.OpenFile(name, os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(cqEntrySize+7))
	f.Close()
	require.NoError(t, fs.Remove("/data/checkpoint"))
	a, err := fs.OpenFile("/data/abort", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	a.Close()

	s = openMem(t, fs, func(o *Options) { o.CQFileEntries = 4 })
	defer s.Close()
	got := readAll(t, s, "Q", 1)
	require.Len(t, got, 10)
	for i, m := range got {
		require.Equal(t, int64(i), m.QueueOffset)
		require.Equal(t, fmt.Sprint(i), m.Properties["k"])
	}
}

func TestConcurrentAppendAndLongPollRead(t *testing.T) {
	s := openMem(t, vfs.NewMem(11, vfs.Strict()), func(o *Options) { o.DispatchChunk = 4096 })
	defer s.Close()
	ctx := testCtx(t)
	const appenders, per, queues = 4, 150, 3
	var wg sync.WaitGroup
	for w := 0; w < appenders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				m := msg("L", int32(i%queues), w*1000+i)
				if _, err := s.Append(ctx, []Message{m, m}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var total sync.Map
	for q := int32(0); q < queues; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := int64(0)
			want := int64(appenders * per * 2 / queues)
			for next < want {
				ch := s.Arrivals("L")
				got, err := s.Read(ctx, "L", q, next, 16, 8<<10)
				if err != nil {
					t.Error(err)
					return
				}
				for _, m := range got {
					if m.QueueOffset != next || m.QueueID != q {
						t.Errorf("queue %d: got offset %d, want %d", q, m.QueueOffset, next)
						return
					}
					next++
				}
				if len(got) == 0 {
					select {
					case <-ch:
					case <-ctx.Done():
						t.Error("long poll timed out")
						return
					}
				}
			}
			total.Store(q, next)
		}()
	}
	wg.Wait()
	for q := int32(0); q < queues; q++ {
		v, _ := total.Load(q)
		require.Equal(t, int64(appenders*per*2/queues), v)
	}
}

func TestTopicOptionsAndLimits(t *testing.T) {
	fs := vfs.NewMem(12, vfs.Strict())
	s := openMem(t, fs, nil)
	ctx := testCtx(t)
	_, err := s.Append(ctx, []Message{msg("X", 0, 0)})
	require.NoError(t, err)
	require.NoError(t, s.WaitDispatched(ctx))
	err = s.SetTopicOptions("X", TopicOptions{BatchCQ: true})
	require.ErrorIs(t, err, ErrInvalidOptions)
	require.NoError(t, s.SetTopicOptions("Y", TopicOptions{BatchCQ: true}))
	// A batch bigger than a segment cannot be one write.
	var huge []Message
	for i := 0; i < 20; i++ {
		huge = append(huge, bigMsg("Y", 0, i, 60_000))
	}
	_, err = s.Append(ctx, huge)
	require.ErrorIs(t, err, ErrMessageTooLarge)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")

	s = openMem(t, fs, nil)
	defer s.Close()
	// BatchCQ persisted: a batch read back as single messages.
	_, err = s.Append(ctx, []Message{msg("Y", 0, 0), msg("Y", 0, 1), msg("Y", 0, 2)})
	require.NoError(t, err)
	require.NoError(t, s.WaitDispatched(ctx))
	q := s.queue("Y", 0)
	require.True(t, q.batch)
	got, err := s.Read(ctx, "Y", 0, 1, 1, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, int64(1), got[0].QueueOffset)

	_, err = Open(ctx, Options{})
	require.ErrorIs(t, err, ErrInvalidOptions)
	_, err = Open(ctx, Options{Dir: "/x", FS: fs, SegmentSize: 1000})
	require.ErrorIs(t, err, ErrInvalidOptions)
	require.True(t, errors.Is(&OffsetRangeError{}, ErrOffsetOutOfRange))
}

func TestQueueHoleTriggersFullRebuild(t *testing.T) {
	fs := vfs.NewMem(13, vfs.Strict())
	mod := func(o *Options) { o.CQFileEntries = 4 }
	s := openMem(t, fs, mod)
	ctx := testCtx(t)
	var last AppendResult
	for i := 0; i < 10; i++ {
		var err error
		last, err = s.Append(ctx, []Message{msg("H", 1, i)})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	// Lose the queue file of offsets 4..7 while a checkpoint claims the
	// queues are complete up to the last record: re-indexing from the
	// checkpoint finds offset 9 after offset 3, a hole.
	require.NoError(t, fs.Remove("/data/consumequeue/H/1/"+segmentName(4)))
	_, end := s.LogRange()
	forgeUncleanCheckpoint(t, fs, last.LogOffset, end)

	s = openMem(t, fs, func(o *Options) { mod(o); o.Logger = zaptest.NewLogger(t) })
	defer s.Close()
	got := readAll(t, s, "H", 1)
	require.Len(t, got, 10)
	for i, m := range got {
		require.Equal(t, fmt.Sprint(i), m.Properties["k"])
	}
}

// TestCheckpointInsideAnAppend: a checkpoint may stop inside an append, when
// the queue file of a queue of single-record entries was written up to a
// record in the middle of that append. A crash after it must not cost the
// acknowledged appends that follow: recovery scans from the middle of the
// append instead of taking it for torn.
func TestCheckpointInsideAnAppend(t *testing.T) {
	fs := vfs.NewMem(21, vfs.Strict())
	s := openMem(t, fs, func(o *Options) {
		o.Flush, o.CQFileEntries, o.CheckpointInterval = FlushSync, 4, time.Hour
	})
	ctx := testCtx(t)
	for i := range 3 {
		_, err := s.Append(ctx, []Message{msg("P", 0, i)})
		require.NoError(t, err)
	}
	// Offsets 3, 4 and 5 in one append: 3 ends the first queue file, 4 and
	// 5 start the second.
	_, err := s.Append(ctx, []Message{msg("P", 0, 3), msg("P", 0, 4), msg("P", 0, 5)})
	require.NoError(t, err)
	require.NoError(t, s.WaitDispatched(ctx))

	second := "/data/consumequeue/P/0/" + segmentName(4)
	var mu sync.Mutex
	fail := true
	fs.WriteFault = func(name string, off int64, n int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail && name == second {
			fail = false
			return 0, syscall.EIO
		}
		return n, nil
	}
	require.ErrorIs(t, s.checkpoint(true), syscall.EIO, "the first file is written, the second is not")
	require.NoError(t, s.checkpoint(false))
	got := readAll(t, s, "P", 0)
	cp, ok := s.readCheckpoint()
	require.True(t, ok)
	require.Equal(t, got[4].LogOffset, cp.dispatched, "the checkpoint stops at the first entry not written: record 1 of the append")

	_, err = s.Append(ctx, []Message{msg("P", 0, 6), msg("P", 0, 7)})
	require.NoError(t, err)
	crashed := fs.CrashClone(true)
	require.NoError(t, s.Close())

	s2 := openMem(t, crashed, nil)
	defer s2.Close()
	got = readAll(t, s2, "P", 0)
	require.Len(t, got, 8, "every acknowledged message survives")
	for i, m := range got {
		require.Equal(t, fmt.Sprint(i), m.Properties["k"])
	}
}

// The size validate returns is the exact size of the encoded batch, so that
// Append sizes its buffer once.
func TestValidateSizesTheRecords(t *testing.T) {
	s := openMem(t, vfs.NewMem(31, vfs.Strict()), nil)
	defer s.Close()
	msgs := []Message{msg("S", 0, 1), bigMsg("S", 0, 2, 3000), {Topic: "S", Body: []byte("x")}}
	msgs[2].Properties = map[string]string{"a": "", "": "b", "long-key-of-some-length": strings.Repeat("v", 300)}
	size, err := s.validate(msgs)
	require.NoError(t, err)
	var buf []byte
	for i := range msgs {
		buf = appendRecord(buf, &msgs[i], uint32(i), uint32(len(msgs)))
	}
	require.Equal(t, len(buf), size)
}
