package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

// Close waits for a lagging index only CloseTimeout long: past it, it stops
// the index, skips the final checkpoint and keeps the abort marker, and the
// next Open rebuilds the missing queue entries from the log.
func TestCloseBoundsTheWaitForALaggingIndex(t *testing.T) {
	const (
		n     = 50
		delay = 100 * time.Millisecond // per append: the index lags n*delay = 5 s
	)
	core, logs := observer.New(zap.WarnLevel)
	fs := vfs.NewMem(7, vfs.Strict())
	s := openMem(t, fs, func(o *Options) {
		o.dispatchDelay = delay
		o.CloseTimeout = 200 * time.Millisecond
		o.Logger = zap.New(core)
	})
	for i := range n {
		_, err := s.Append(testCtx(t), []Message{msg("T", 0, i)})
		require.NoError(t, err)
	}

	start := time.Now()
	require.NoError(t, s.Close())
	took := time.Since(start)
	require.Less(t, took, 2*time.Second, "Close waited for the whole index (%d appends of %v)", n, delay)
	require.Less(t, s.dispatched.Load(), s.written.Load(), "the index did not lag at Close: the test shows nothing")
	require.Equal(t, 1, logs.FilterMessageSnippet("index still behind the log at Close").Len())
	require.True(t, statMem(t, fs, "/data/"+abortName), "the next Open must rescan the log")

	s = openMem(t, fs, nil)
	defer s.Close()
	got := readAll(t, s, "T", 0)
	require.Len(t, got, n)
	for i, m := range got {
		require.Equal(t, int64(i), m.QueueOffset)
		require.Equal(t, msg("T", 0, i).Body, m.Body)
	}
}
