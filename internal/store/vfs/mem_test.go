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
