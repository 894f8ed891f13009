package store

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

// fillSegmentExactly appends single messages to topic/q until the log ends
// exactly at the end of the current segment (a batch may end there: write()
// lets s.writePos+total == seg.end() through without padding). It returns the
// queue offset of the last message, the one that ends at the segment end.
func fillSegmentExactly(t *testing.T, s *Store, topic string, q int32) int64 {
	t.Helper()
	ctx := testCtx(t)
	seg := s.opts.SegmentSize
	var last int64 = -1
	for {
		_, end := s.LogRange()
		rem := seg - end%seg
		if rem == seg && end > 0 {
			return last
		}
		body := 100_000
		if rem <= int64(body)+2*int64(recordOverhead)+2 {
			body = int(rem) - recordOverhead - len(topic)
		}
		res, err := s.Append(ctx, []Message{{Topic: topic, QueueID: q, Body: make([]byte, body)}})
		require.NoError(t, err)
		last = res.FirstOffset
	}
}

// A record that ends exactly at a segment end and the next record, at the
// start of the next segment, are adjacent in log offsets: Read used to
// merge them into one log read, which crossed the segment boundary and
// failed, for good, for every offset whose read reached the boundary.
func TestReadAcrossExactSegmentEnd(t *testing.T) {
	s := openMem(t, vfs.NewMem(101, vfs.Strict()), func(o *Options) { o.MaxMessageSize = 256 << 10 })
	defer s.Close()
	ctx := testCtx(t)
	last := fillSegmentExactly(t, s, "X", 0)
	_, end := s.LogRange()
	require.Equal(t, s.opts.SegmentSize, end, "the log ends exactly at the first segment's end")
	res, err := s.Append(ctx, []Message{{Topic: "X", QueueID: 0, Body: []byte("next")}})
	require.NoError(t, err)
	require.Equal(t, s.opts.SegmentSize, res.LogOffset, "no padding: the next record starts the next segment")
	require.NoError(t, s.WaitDispatched(ctx))

	// A consumer pulling 32 messages from any offset whose first merged read
	// reaches the segment end is stuck: the same error at every retry.
	for off := int64(0); off <= last; off++ {
		got, err := s.Read(ctx, "X", 0, off, 32, 0)
		require.NoError(t, err, "Read(offset %d, 32) across the end of a full segment (last offset in it: %d)", off, last)
		require.Equal(t, off, got[0].QueueOffset)
		require.Equal(t, last+1, got[len(got)-1].QueueOffset)
	}
}

// Retention used to shrink the segment list first and move the queues' min
// offsets after it: a Read in between found its offset valid, its segment
// gone, and returned an internal error that wraps none of the package's
// sentinels (callers look for ErrOffsetOutOfRange to move a consumer on).
// The minimums now move first; a Read in between gets ErrOffsetOutOfRange.
func TestReadDuringRetentionGivesTypedError(t *testing.T) {
	s := openMem(t, vfs.NewMem(102, vfs.Strict()), func(o *Options) {
		o.MaxMessageSize = 256 << 10
		o.RetentionBytes = MinSegmentSize
		o.CheckpointInterval = time.Hour
	})
	defer s.Close()
	ctx := testCtx(t)
	_, err := s.Append(ctx, []Message{{Topic: "A", Body: []byte("a")}})
	require.NoError(t, err)
	for i := 0; i < 40; i++ {
		_, err := s.Append(ctx, []Message{{Topic: "B", Body: make([]byte, 100_000)}})
		require.NoError(t, err)
	}
	require.NoError(t, s.WaitDispatched(ctx))
	require.NoError(t, s.Flush(ctx))
	require.NoError(t, s.checkpoint(true))

	min, _ := s.Offsets("B", 0)
	// Pin retention between moving the queues' minimums and dropping the
	// segments: it waits for the segment list's write lock.
	s.segMu.RLock()
	done := make(chan error, 1)
	go func() { done <- s.applyRetention(time.Now()) }()
	require.Eventually(t, func() bool { m, _ := s.Offsets("B", 0); return m > min }, 10*time.Second, time.Millisecond)
	_, err = s.Read(ctx, "B", 0, min, 1, 0)
	s.segMu.RUnlock()
	require.NoError(t, <-done)
	require.ErrorIs(t, err, ErrOffsetOutOfRange, "a read of an offset retention is deleting")
	first, _ := s.LogRange()
	require.Positive(t, first, "retention dropped segments")
	_, err = s.Read(ctx, "B", 0, min, 1, 0)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
}

// topics.json holding the JSON value null unmarshals into a nil map: Open
// used to accept it, and the first SetTopicOptions then panicked assigning
// into the nil map. It is ErrCorrupt now.
func TestNullTopicsFileIsCorrupt(t *testing.T) {
	fs := vfs.NewMem(103, vfs.Strict())
	s := openMem(t, fs, nil)
	require.NoError(t, s.SetTopicOptions("T", TopicOptions{BatchCQ: true}))
	require.NoError(t, s.Close())
	f, err := fs.OpenFile("/data/"+topicsName, os.O_RDWR|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("null"), 0)
	require.NoError(t, err)
	f.Close()

	_, err = Open(testCtx(t), Options{Dir: "/data", FS: fs, SegmentSize: MinSegmentSize})
	require.ErrorIs(t, err, ErrCorrupt)
}

// escapeTopic writes every byte outside [A-Za-z0-9_-] as three, so a topic
// of 255 bytes or fewer, such as 250 letters and three dots, could become a
// directory name over the 255-byte limit of Linux file systems. Its queue
// files could never be written: every checkpoint failed (so the checkpoint
// offset and retention stopped for the whole store) and Close failed. Such
// a topic is now refused at Append; the longest one that fits works.
func TestLongEscapedTopicIsRefused(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, SegmentSize: MinSegmentSize, CheckpointInterval: time.Hour}
	ctx := testCtx(t)
	s, err := Open(ctx, o)
	require.NoError(t, err)
	_, err = s.Append(ctx, []Message{{Topic: strings.Repeat("a", 250) + "...", Body: []byte("x")}})
	require.ErrorIs(t, err, ErrInvalidMessage)
	fits := strings.Repeat("a", 249) + ".."
	_, err = s.Append(ctx, []Message{{Topic: fits, Body: []byte("x")}})
	require.NoError(t, err)
	require.NoError(t, s.WaitDispatched(ctx))
	require.NoError(t, s.checkpoint(true), "checkpoint with the longest topic that fits")
	require.NoError(t, s.Close())
}

// A consume-queue file cut short after a clean Close: loadQueue noticed
// (it dropped the entries past the cut) but, on the trusted path, nothing
// re-indexed the log. The queue's max offset went back, the messages past
// the cut vanished without an error, and the next append was given an
// offset the log already held for another message. Now the queues are
// rebuilt from the log.
func TestTruncatedQueueFileAfterCleanClose(t *testing.T) {
	fs := vfs.NewMem(104, vfs.Strict())
	mod := func(o *Options) { o.CQFileEntries = 4 }
	s := openMem(t, fs, mod)
	ctx := testCtx(t)
	for i := 0; i < 10; i++ {
		_, err := s.Append(ctx, []Message{msg("Q", 1, i)})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	f, err := fs.OpenFile("/data/consumequeue/Q/1/"+segmentName(4), os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(cqEntrySize+7)) // offset 4 whole, offset 5 torn
	f.Close()

	s, err = Open(ctx, Options{Dir: "/data", FS: fs, SegmentSize: MinSegmentSize, MaxMessageSize: 64 << 10, CQFileEntries: 4})
	if err != nil {
		require.ErrorIs(t, err, ErrCorrupt)
		return
	}
	defer s.Close()
	_, max := s.Offsets("Q", 1)
	require.Equal(t, int64(10), max, "the queue lost offsets 5..9 that the log still holds")
	res, err := s.Append(ctx, []Message{msg("Q", 1, 10)})
	require.NoError(t, err)
	require.Equal(t, int64(10), res.FirstOffset, "the next append reuses a queue offset")
}

// The fallback for a queue with a hole (remove every queue file, re-index
// the whole log from its first segment) used to forget the next offset of
// a queue whose messages retention had already deleted: that queue's last
// file is kept precisely so its next offset survives a restart, but the
// rebuild removed it and found no record to re-create the queue from, so
// its offsets started again at 0. The hole is made as in
// TestQueueHoleTriggersFullRebuild.
func TestRebuildAfterRetentionKeepsNextOffset(t *testing.T) {
	fs := vfs.NewMem(105, vfs.Strict())
	mod := func(o *Options) {
		o.CQFileEntries = 4
		o.CheckpointInterval = time.Hour
		o.RetentionBytes = 2 * MinSegmentSize
	}
	s := openMem(t, fs, mod)
	ctx := testCtx(t)
	for i := 0; i < 6; i++ {
		_, err := s.Append(ctx, []Message{msg("H", 0, i)})
		require.NoError(t, err)
	}
	var last AppendResult
	for i := 0; i < 300; i++ {
		var err error
		last, err = s.Append(ctx, []Message{bigMsg("R", 0, i, 10_000)})
		require.NoError(t, err)
	}
	require.NoError(t, s.WaitDispatched(ctx))
	require.NoError(t, s.Flush(ctx))
	require.NoError(t, s.checkpoint(true))
	require.NoError(t, s.applyRetention(time.Now()))
	hmin, hmax := s.Offsets("H", 0)
	require.Equal(t, [2]int64{6, 6}, [2]int64{hmin, hmax}, "H's messages are all deleted, its next offset is 6")
	require.NoError(t, s.Close())

	// A hole in R's queue below a checkpoint that claims it complete.
	names, err := fs.ReadDir("/data/consumequeue/R/0")
	require.NoError(t, err)
	require.NoError(t, fs.Remove("/data/consumequeue/R/0/"+names[len(names)-3]))
	_, end := s.LogRange()
	forgeUncleanCheckpoint(t, fs, last.LogOffset, end)

	s = openMem(t, fs, mod)
	defer s.Close()
	_, rmax := s.Offsets("R", 0)
	require.Equal(t, int64(300), rmax, "R rebuilt")
	res, err := s.Append(ctx, []Message{msg("H", 0, 6)})
	require.NoError(t, err)
	require.Equal(t, int64(6), res.FirstOffset, "H's next offset after the rebuild")
}

// forgeUncleanCheckpoint makes the store in fs at /data look as if it
// crashed with a checkpoint claiming the queues complete up to dispatched:
// a newer checkpoint record, and the abort marker.
func forgeUncleanCheckpoint(t *testing.T, fs vfs.FS, dispatched, logEnd int64) {
	t.Helper()
	f, err := fs.OpenFile("/data/checkpoint", os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(checkpointRec{seq: 1 << 40, dispatched: dispatched, logEnd: logEnd}.encode(), 0)
	require.NoError(t, err)
	f.Close()
	a, err := fs.OpenFile("/data/abort", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	a.Close()
}
