package config

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func docWithWeight(t *testing.T, w int) []byte {
	t.Helper()
	data, err := withWeight(w).Marshal()
	require.NoError(t, err)
	return data
}

func fastFile(path string) Source {
	return File(path, FileOptions{PollInterval: 5 * time.Millisecond, Settle: 30 * time.Millisecond, RescanEvery: time.Hour})
}

func next(t *testing.T, ch <-chan Version) Version {
	t.Helper()
	select {
	case v, ok := <-ch:
		require.True(t, ok, "source closed")
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no version")
	}
	return Version{}
}

func weightOf(v Version) int { return v.Config.Topics["t"].Clusters[0].Weight }

// renameSave writes like an editor or an atomic writer: a temp file in the
// same directory, renamed over the target.
func renameSave(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

func TestFileSourceInPlaceAndRenameSave(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "twinmq.json")
	require.NoError(t, os.WriteFile(path, docWithWeight(t, 1), 0o644))

	ch, err := fastFile(path).Watch(ctx)
	require.NoError(t, err)
	v := next(t, ch)
	require.NoError(t, v.Err)
	assert.Equal(t, 1, weightOf(v))
	assert.Equal(t, Revision(docWithWeight(t, 1)), v.Revision)

	require.NoError(t, os.WriteFile(path, docWithWeight(t, 2), 0o644))
	assert.Equal(t, 2, weightOf(next(t, ch)))

	renameSave(t, path, docWithWeight(t, 3))
	assert.Equal(t, 3, weightOf(next(t, ch)))

	// Same bytes under a new inode: new stat, same revision, nothing yielded.
	renameSave(t, path, docWithWeight(t, 3))
	renameSave(t, path, docWithWeight(t, 4))
	assert.Equal(t, 4, weightOf(next(t, ch)))

	cancel()
	for range ch {
	}
}

// TestFileSourceKubernetesSymlinkSwap reproduces how the kubelet updates a
// mounted ConfigMap: the file is a symlink to ..data/<name>, ..data is a
// symlink to a timestamped directory, and an update writes a new directory
// and renames a new ..data symlink over the old one.
func TestFileSourceKubernetesSymlinkSwap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	version := func(name string, data []byte) {
		require.NoError(t, os.Mkdir(filepath.Join(dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "twinmq.json"), data, 0o644))
		require.NoError(t, os.Symlink(name, filepath.Join(dir, "..data_tmp")))
		require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	}
	version("..2026_01_01_00_00_00.1", docWithWeight(t, 1))
	path := filepath.Join(dir, "twinmq.json")
	require.NoError(t, os.Symlink(filepath.Join("..data", "twinmq.json"), path))

	ch, err := fastFile(path).Watch(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, weightOf(next(t, ch)))

	version("..2026_01_01_00_01_00.2", docWithWeight(t, 2))
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")))
	v := next(t, ch)
	require.NoError(t, v.Err)
	assert.Equal(t, 2, weightOf(v))
}

func TestFileSourceDoesNotReadAHalfWrittenFile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "twinmq.json")
	require.NoError(t, os.WriteFile(path, docWithWeight(t, 1), 0o644))
	// Settle is far above the writer's pauses, not just above them: this
	// test holds only while the writer is never stalled for Settle, and a
	// loaded machine can stall a goroutine for hundreds of milliseconds.
	src := File(path, FileOptions{PollInterval: 5 * time.Millisecond, Settle: 2 * time.Second, RescanEvery: time.Hour})
	ch, err := src.Watch(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, weightOf(next(t, ch)))

	// Write in place in two halves with pauses well inside Settle: polls see
	// the truncated and the half file, but the file is not read before it
	// held still.
	full := docWithWeight(t, 2)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	time.Sleep(30 * time.Millisecond)
	_, err = f.Write(full[:len(full)/2])
	require.NoError(t, err)
	time.Sleep(30 * time.Millisecond)
	_, err = f.Write(full[len(full)/2:])
	require.NoError(t, err)
	require.NoError(t, f.Close())

	v := next(t, ch)
	require.NoError(t, v.Err, "the half-written file must not have been read")
	assert.Equal(t, 2, weightOf(v))
	assert.Equal(t, Revision(full), v.Revision)
}

// The poll loop decides to read on one stat; a write can start between that
// stat and the read. A truncating writer caught right there leaves an empty or
// partial file that holds still for the length of the read, so the
// before/after check alone would pass it: read must also refuse a file that no
// longer matches the stat it was asked to read.
func TestFileSourceReadRefusesChangeSinceDecision(t *testing.T) {
	path := filepath.Join(t.TempDir(), "twinmq.json")
	require.NoError(t, os.WriteFile(path, docWithWeight(t, 1), 0o644))
	s := File(path, FileOptions{}).(*fileSource)
	decided := s.stat()

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0) // the writer has begun
	require.NoError(t, err)
	defer f.Close()

	data, st, ok, err := s.read(&decided)
	require.NoError(t, err)
	assert.False(t, ok, "a file changed since the decision has not settled")
	assert.Nil(t, data)
	assert.Zero(t, st.size, "the caller restarts the settle clock from the new stat")

	data, _, ok, err = s.read(nil)
	require.NoError(t, err)
	assert.True(t, ok, "without an expectation the stable empty file is read")
	assert.Empty(t, data)
}

func TestFileSourceMissingFileThenCreated(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "twinmq.json")
	ch, err := fastFile(path).Watch(ctx)
	require.NoError(t, err)
	v := next(t, ch)
	assert.ErrorIs(t, v.Err, fs.ErrNotExist)

	renameSave(t, path, docWithWeight(t, 7))
	v = next(t, ch)
	require.NoError(t, v.Err)
	assert.Equal(t, 7, weightOf(v))
}

func TestFileSourceRescanCatchesSameStatEdit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "twinmq.json")
	one, two := docWithWeight(t, 1), docWithWeight(t, 2)
	require.Equal(t, len(one), len(two))
	require.NoError(t, os.WriteFile(path, one, 0o644))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	src := File(path, FileOptions{PollInterval: 5 * time.Millisecond, RescanEvery: 50 * time.Millisecond})
	ch, err := src.Watch(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, weightOf(next(t, ch)))

	// Same size, same inode, modification time put back: only a rescan sees it.
	require.NoError(t, os.WriteFile(path, two, 0o644))
	require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
	assert.Equal(t, 2, weightOf(next(t, ch)))
}

// TestWatcherOnFileKeepsLastGoodOnCorruptFile is the whole reload path: a
// corrupt document and an invalid one are rejected, counted and logged, the
// last good version keeps serving, and a fixed file is picked up again.
func TestWatcherOnFileKeepsLastGoodOnCorruptFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "twinmq.json")
	require.NoError(t, os.WriteFile(path, docWithWeight(t, 1), 0o644))
	reg := prometheus.NewRegistry()
	w, err := Start(ctx, fastFile(path), Options{Registerer: reg})
	require.NoError(t, err)
	defer w.Close()
	got := make(chan int, 10)
	w.Subscribe(func(_, n *Config) { got <- n.Topics["t"].Clusters[0].Weight })

	renameSave(t, path, docWithWeight(t, 2))
	assert.Equal(t, 2, <-got)

	renameSave(t, path, []byte(`{"topics": {"t": {"clusters": [`))
	require.Eventually(t, func() bool { return reloads(t, reg, ResultRejected) == 1 }, 10*time.Second, time.Millisecond)
	assert.ErrorIs(t, w.LastError(), ErrInvalidConfig)
	assert.Equal(t, 2, w.Current().Topics["t"].Clusters[0].Weight)

	renameSave(t, path, docWithWeight(t, -1)) // parses, fails validation
	require.Eventually(t, func() bool { return reloads(t, reg, ResultRejected) == 2 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 2, w.Current().Topics["t"].Clusters[0].Weight)

	require.NoError(t, os.Remove(path))
	require.Eventually(t, func() bool { return reloads(t, reg, ResultRejected) == 3 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 2, w.Current().Topics["t"].Clusters[0].Weight, "a deleted file keeps the last good config")

	renameSave(t, path, docWithWeight(t, 5))
	assert.Equal(t, 5, <-got)
	assert.NoError(t, w.LastError())
	assert.Equal(t, 3.0, reloads(t, reg, ResultAccepted))
}
