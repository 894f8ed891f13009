package store

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

// "Recovered after an unclean shutdown" is said only after one: not for a
// brand-new data directory, nor after a clean Close, but after a crash.
func TestUncleanShutdownLoggedOnlyAfterOne(t *testing.T) {
	const line = "store: recovered after an unclean shutdown"
	core, logs := observer.New(zap.InfoLevel)
	fs := vfs.NewMem(1, vfs.Strict())
	withLog := func(o *Options) { o.Logger = zap.New(core) }

	s := openMem(t, fs, withLog)
	require.Zero(t, logs.FilterMessage(line).Len(), "a new data directory had nothing to recover")
	_, err := s.Append(testCtx(t), []Message{msg("T", 0, 1)})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = openMem(t, fs, withLog)
	require.Zero(t, logs.FilterMessage(line).Len(), "after a clean Close")
	_, err = s.Append(testCtx(t), []Message{msg("T", 0, 2)})
	require.NoError(t, err)
	require.NoError(t, s.Flush(testCtx(t)))

	crashed := fs.CrashClone(true)
	require.NoError(t, s.Close())
	s = openMem(t, crashed, withLog)
	require.Equal(t, 1, logs.FilterMessage(line).Len(), "after a crash")
	require.NoError(t, s.Close())
}
