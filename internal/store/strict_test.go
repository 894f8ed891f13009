package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

func statMem(t *testing.T, fs *vfs.MemFS, name string) bool {
	t.Helper()
	ok, _, err := fs.Stat(name)
	require.NoError(t, err)
	return ok
}

// A strict file system keeps a new, renamed or removed name through a power
// loss only once its directory was synced: every name the store relies on
// after a crash must have been.
func TestStoreNamesSurvivePowerLoss(t *testing.T) {
	t.Run("abort marker", func(t *testing.T) {
		// A lost marker makes the next open trust the checkpoint of a run
		// that did not close.
		fs := vfs.NewMem(41, vfs.Strict())
		s := openMem(t, fs, nil)
		defer s.Close()
		require.True(t, statMem(t, fs.CrashClone(false), "/data/"+abortName))
	})
	t.Run("checkpoint", func(t *testing.T) {
		fs := vfs.NewMem(42, vfs.Strict())
		s := openMem(t, fs, func(o *Options) { o.Flush = FlushSync })
		defer s.Close()
		_, err := s.Append(testCtx(t), []Message{msg("t", 0, 1)})
		require.NoError(t, err)
		require.NoError(t, s.WaitDispatched(testCtx(t)))
		require.NoError(t, s.checkpoint(true))
		img := fs.CrashClone(false)
		require.True(t, statMem(t, img, "/data/"+checkpointName))
		names, err := img.ReadDir("/data/" + cqDir + "/t/0")
		require.NoError(t, err)
		require.NotEmpty(t, names, "the queue file the checkpoint relies on is gone")
	})
	t.Run("topic options", func(t *testing.T) {
		fs := vfs.NewMem(43, vfs.Strict())
		s := openMem(t, fs, nil)
		defer s.Close()
		require.NoError(t, s.SetTopicOptions("batched", TopicOptions{BatchCQ: true}))
		s2 := openMem(t, fs.CrashClone(false), nil)
		defer s2.Close()
		require.Equal(t, TopicOptions{BatchCQ: true}, s2.topicOpts["batched"])
	})
	t.Run("segments of acknowledged appends", func(t *testing.T) {
		fs := vfs.NewMem(44, vfs.Strict())
		s := openMem(t, fs, func(o *Options) { o.Flush = FlushSync })
		defer s.Close()
		n := 0
		for {
			_, err := s.Append(testCtx(t), []Message{msg("t", 0, n)})
			require.NoError(t, err)
			n++
			if _, end := s.LogRange(); end > MinSegmentSize {
				break // the last append went to a new segment
			}
		}
		s2 := openMem(t, fs.CrashClone(false), nil)
		defer s2.Close()
		require.Len(t, readAll(t, s2, "t", 0), n)
	})
	t.Run("clean close", func(t *testing.T) {
		fs := vfs.NewMem(45, vfs.Strict())
		s := openMem(t, fs, nil)
		require.NoError(t, s.Close())
		require.False(t, statMem(t, fs.CrashClone(false), "/data/"+abortName),
			"a clean close must not look like a crash after a power loss")
	})
}

var errInjected = errors.New("injected fault")

// A rename that fails leaves the topic's options as they were, in memory
// and on disk, and says why.
func TestTopicOptionsRenameFault(t *testing.T) {
	fs := vfs.NewMem(46, vfs.Strict())
	s := openMem(t, fs, nil)
	fs.RenameFault = func(string, string) error { return errInjected }
	require.ErrorIs(t, s.SetTopicOptions("batched", TopicOptions{BatchCQ: true}), errInjected)
	require.Zero(t, s.topicOpts["batched"])
	fs.RenameFault = nil
	require.NoError(t, s.Close())
	s = openMem(t, fs, nil)
	defer s.Close()
	require.Zero(t, s.topicOpts["batched"])
	require.NoError(t, s.SetTopicOptions("batched", TopicOptions{BatchCQ: true}))
}

// An open or a read that fails is reported, typed, and damages nothing: once
// the fault is gone the same store (or a reopened one) has every message.
func TestOpenAndReadFaults(t *testing.T) {
	fs := vfs.NewMem(47, vfs.Strict())
	s := openMem(t, fs, func(o *Options) { o.Flush = FlushSync })
	for i := range 20 {
		_, err := s.Append(testCtx(t), []Message{msg("t", 0, i)})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())

	inLog := func(name string) bool { return strings.Contains(name, "/"+commitLogDir+"/") }
	fs.OpenFault = func(name string, _ int) error {
		if inLog(name) {
			return errInjected
		}
		return nil
	}
	_, err := Open(testCtx(t), Options{Dir: "/data", FS: fs, SegmentSize: MinSegmentSize, MaxMessageSize: 64 << 10})
	require.ErrorIs(t, err, errInjected)
	fs.OpenFault = nil

	s = openMem(t, fs, nil)
	defer s.Close()
	fs.ReadFault = func(name string, _ int64, _ int) error {
		if inLog(name) {
			return errInjected
		}
		return nil
	}
	_, err = s.Read(testCtx(t), "t", 0, 0, 20, 0)
	require.ErrorIs(t, err, errInjected)
	fs.ReadFault = nil
	got := readAll(t, s, "t", 0)
	require.Len(t, got, 20)
	for i, m := range got {
		require.Equal(t, msg("t", 0, i).Body, m.Body)
	}
}

// A read that fails while recovery scans the log fails Open: it used to be
// taken for the end of the log, and the log was cut there, taking
// acknowledged messages with it.
func TestRecoveryScanReadFaultFailsOpen(t *testing.T) {
	fs := vfs.NewMem(48, vfs.Strict())
	s := openMem(t, fs, func(o *Options) { o.Flush = FlushSync })
	for i := range 20 {
		_, err := s.Append(testCtx(t), []Message{msg("t", 0, i)})
		require.NoError(t, err)
	}
	img := fs.CrashClone(true) // a process crash: the next open scans the log
	require.NoError(t, s.Close())

	img.ReadFault = func(name string, _ int64, _ int) error {
		if strings.Contains(name, "/"+commitLogDir+"/") {
			return errInjected
		}
		return nil
	}
	_, err := Open(testCtx(t), Options{Dir: "/data", FS: img, SegmentSize: MinSegmentSize, MaxMessageSize: 64 << 10})
	require.ErrorIs(t, err, errInjected)
	img.ReadFault = nil
	s = openMem(t, img, nil)
	defer s.Close()
	require.Len(t, readAll(t, s, "t", 0), 20)
}
