package vfs

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func readAll(t *testing.T, fs FS, name string) []byte {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	n, err := f.Size()
	require.NoError(t, err)
	b := make([]byte, n)
	_, _ = f.ReadAt(b, 0)
	return b
}

func TestCrashCloneKeepsSyncedAndAPrefixOfTheRest(t *testing.T) {
	synced := bytes.Repeat([]byte("s"), 100)
	later := bytes.Repeat([]byte("u"), 100)
	sawTorn, sawAll, sawNone := false, false, false
	for seed := uint64(0); seed < 200; seed++ {
		m := NewMem(seed)
		require.NoError(t, m.MkdirAll("/d", 0o755))
		f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
		require.NoError(t, err)
		_, err = f.WriteAt(synced, 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		_, err = f.WriteAt(later, 100)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("X"), 10) // an overwrite of synced bytes
		require.NoError(t, err)

		got := readAll(t, m.CrashClone(false), "/d/f")
		require.GreaterOrEqual(t, len(got), 100)
		require.LessOrEqual(t, len(got), 200)
		require.Equal(t, later[:len(got)-100], got[100:])
		if got[10] == 'X' {
			require.Len(t, got, 200, "the overwrite came after the whole append")
		} else {
			require.Equal(t, synced, got[:100])
		}
		switch len(got) {
		case 100:
			sawNone = true
		case 200:
			sawAll = true
		default:
			sawTorn = true
		}
		full := readAll(t, m.CrashClone(true), "/d/f")
		require.Len(t, full, 200)
		require.Equal(t, byte('X'), full[10])
	}
	require.True(t, sawTorn && sawAll)
	_ = sawNone // a crash image may also keep none of the unsynced writes; too rare to require
}

func TestCrashAtWriteTearsAndStops(t *testing.T) {
	m := NewMem(1)
	require.NoError(t, m.MkdirAll("/d", 0o755))
	f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	m.CrashAtWrite(2)
	_, err = f.WriteAt([]byte("first"), 0)
	require.NoError(t, err)
	n, err := f.WriteAt([]byte("second write"), 5)
	require.ErrorIs(t, err, ErrCrashed)
	require.Less(t, n, len("second write"))
	require.True(t, m.Crashed())
	_, err = f.WriteAt([]byte("x"), 0)
	require.True(t, errors.Is(err, ErrCrashed))
	require.ErrorIs(t, f.Sync(), ErrCrashed)
	_, err = m.OpenFile("/d/g", os.O_RDWR|os.O_CREATE, 0o644)
	require.ErrorIs(t, err, ErrCrashed)
	got := readAll(t, m.CrashClone(true), "/d/f")
	require.Equal(t, "first", string(got[:5]))
	require.Len(t, got, 5+n)
}

func TestTruncateIsUndoneUnlessSynced(t *testing.T) {
	m := NewMem(2)
	require.NoError(t, m.MkdirAll("/d", 0o755))
	f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("0123456789"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Truncate(4))
	for i := 0; i < 20; i++ {
		got := string(readAll(t, m.CrashClone(false), "/d/f"))
		require.Contains(t, []string{"0123", "0123456789"}, got)
	}
	require.NoError(t, f.Sync())
	require.Equal(t, "0123", string(readAll(t, m.CrashClone(false), "/d/f")))
	names, err := m.ReadDir("/d")
	require.NoError(t, err)
	require.Equal(t, []string{"f"}, names)
}

func writeFile(t *testing.T, fs FS, name, data string) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(data), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

func exists(t *testing.T, fs FS, name string) bool {
	t.Helper()
	ok, _, err := fs.Stat(name)
	require.NoError(t, err)
	return ok
}

func TestStrictNewFileNeedsItsDirectorySynced(t *testing.T) {
	m := NewMem(1, Strict())
	require.NoError(t, m.MkdirAll("/d", 0o755))
	writeFile(t, m, "/d/f", "data")
	require.False(t, exists(t, m.CrashClone(false), "/d/f"), "a power loss keeps a name never synced")
	require.True(t, exists(t, m.CrashClone(true), "/d/f"), "a process crash keeps every name")
	require.NoError(t, m.SyncDir("/d"))
	img := m.CrashClone(false)
	require.Equal(t, "data", string(readAll(t, img, "/d/f")))
	require.True(t, img.IsStrict())

	lax := NewMem(1)
	require.NoError(t, lax.MkdirAll("/d", 0o755))
	writeFile(t, lax, "/d/f", "data")
	require.True(t, exists(t, lax.CrashClone(false), "/d/f"), "not strict: names are durable at once")
}

func TestStrictRenameAndRemoveNeedTheirDirectorySynced(t *testing.T) {
	m := NewMem(2, Strict())
	require.NoError(t, m.MkdirAll("/d", 0o755))
	writeFile(t, m, "/d/cp", "old")
	writeFile(t, m, "/d/gone", "x")
	require.NoError(t, m.SyncDir("/d"))

	writeFile(t, m, "/d/cp.tmp", "new")
	require.NoError(t, m.Rename("/d/cp.tmp", "/d/cp"))
	require.NoError(t, m.Remove("/d/gone"))
	require.Equal(t, "new", string(readAll(t, m, "/d/cp")))
	img := m.CrashClone(false)
	require.Equal(t, "old", string(readAll(t, img, "/d/cp")), "an unsynced rename is undone")
	require.False(t, exists(t, img, "/d/cp.tmp"))
	require.True(t, exists(t, img, "/d/gone"), "an unsynced removal is undone")

	require.NoError(t, m.SyncDir("/d"))
	img = m.CrashClone(false)
	require.Equal(t, "new", string(readAll(t, img, "/d/cp")))
	names, err := img.ReadDir("/d")
	require.NoError(t, err)
	require.Equal(t, []string{"cp"}, names)
}

func TestStrictDirectoryRemovalIsDurableAtOnce(t *testing.T) {
	m := NewMem(3, Strict())
	require.NoError(t, m.MkdirAll("/d/q", 0o755))
	writeFile(t, m, "/d/q/f", "x")
	require.NoError(t, m.SyncDir("/d/q"))
	require.NoError(t, m.RemoveAll("/d/q"))
	require.NoError(t, m.MkdirAll("/d/q", 0o755))
	require.False(t, exists(t, m.CrashClone(false), "/d/q/f"))
}

// On a strict MemFS the crash point may fall on a truncation, a rename or a
// removal, which then takes effect or not.
func TestStrictCrashAtTruncateRenameRemove(t *testing.T) {
	ops := map[string]func(m *MemFS, f File) error{
		"truncate": func(_ *MemFS, f File) error { return f.Truncate(1) },
		"rename":   func(m *MemFS, _ File) error { return m.Rename("/d/f", "/d/g") },
		"remove":   func(m *MemFS, _ File) error { return m.Remove("/d/f") },
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			applied, skipped := 0, 0
			for seed := uint64(0); seed < 40; seed++ {
				m := NewMem(seed, Strict())
				require.NoError(t, m.MkdirAll("/d", 0o755))
				f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
				require.NoError(t, err)
				_, err = f.WriteAt([]byte("0123"), 0)
				require.NoError(t, err)
				before := m.Writes()
				m.CrashAtWrite(1)
				require.ErrorIs(t, op(m, f), ErrCrashed)
				require.True(t, m.Crashed())
				require.Equal(t, "/d/f", m.CrashedIn())
				require.Equal(t, name, m.CrashedOp())
				require.Equal(t, before+1, m.Writes())
				require.ErrorIs(t, m.SyncDir("/d"), ErrCrashed)
				img := m.CrashClone(true)
				if exists(t, img, "/d/f") && len(readAll(t, img, "/d/f")) == 4 {
					skipped++
				} else {
					applied++
				}
			}
			require.Positive(t, applied)
			require.Positive(t, skipped)
		})
	}
	// Not strict: only writes are crash points.
	m := NewMem(1)
	require.NoError(t, m.MkdirAll("/d", 0o755))
	f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	m.CrashAtWrite(1)
	require.NoError(t, f.Truncate(0))
	require.NoError(t, m.Rename("/d/f", "/d/g"))
	require.False(t, m.Crashed())
}

func TestInjectedFaults(t *testing.T) {
	m := NewMem(4, Strict())
	require.NoError(t, m.MkdirAll("/d", 0o755))
	writeFile(t, m, "/d/f", "data")
	boom := errors.New("boom")

	m.OpenFault = func(name string, flag int) error {
		if name == "/d/f" && flag&os.O_CREATE == 0 {
			return boom
		}
		return nil
	}
	_, err := m.OpenFile("/d/f", os.O_RDONLY, 0)
	require.ErrorIs(t, err, boom)
	m.OpenFault = nil

	f, err := m.OpenFile("/d/f", os.O_RDONLY, 0)
	require.NoError(t, err)
	m.ReadFault = func(string, int64, int) error { return boom }
	_, err = f.ReadAt(make([]byte, 4), 0)
	require.ErrorIs(t, err, boom)
	m.ReadFault = nil
	require.Equal(t, "data", string(readAll(t, m, "/d/f")))

	m.RenameFault = func(string, string) error { return boom }
	require.ErrorIs(t, m.Rename("/d/f", "/d/g"), boom)
	m.RenameFault = nil
	require.True(t, exists(t, m, "/d/f"), "a failed rename changes nothing")
	require.False(t, exists(t, m, "/d/g"))

	m.SyncFault = func(name string) error {
		if name == "/d" {
			return boom
		}
		return nil
	}
	require.ErrorIs(t, m.SyncDir("/d"), boom)
	require.False(t, exists(t, m.CrashClone(false), "/d/f"), "a failed directory sync makes nothing durable")
	require.ErrorIs(t, m.SyncDir("/missing"), os.ErrNotExist)
}

func TestOSSyncDir(t *testing.T) {
	dir := t.TempDir()
	fs := OS()
	writeFile(t, fs, dir+"/f", "data")
	require.NoError(t, fs.Rename(dir+"/f", dir+"/g"))
	require.NoError(t, fs.SyncDir(dir))
	require.Equal(t, "data", string(readAll(t, fs, dir+"/g")))
	require.ErrorIs(t, fs.SyncDir(dir+"/missing"), os.ErrNotExist)
}

func TestSyncedCloneKeepsOnlyWhatWasSynced(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		m := NewMem(seed, Strict())
		require.NoError(t, m.MkdirAll("/d", 0o755))
		writeFile(t, m, "/d/f", "0123456789")
		require.NoError(t, m.SyncDir("/d"))
		f, err := m.OpenFile("/d/f", os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("later"), 10)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(3))
		_, err = f.WriteAt([]byte("X"), 0)
		require.NoError(t, err)
		writeFile(t, m, "/d/new", "unnamed") // synced data, unsynced name
		img := m.SyncedClone()
		require.Equal(t, "0123456789", string(readAll(t, img, "/d/f")))
		require.False(t, exists(t, img, "/d/new"))
	}
}
