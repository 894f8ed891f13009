package config

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Status says which revision is in force and which version was refused
// last, with why, before and after a later version is accepted.
func TestStatusShowsAppliedAndRejected(t *testing.T) {
	in := make(chan Version, 1)
	in <- Version{Config: withWeight(1), Revision: "r1"}
	before := time.Now()
	w, err := Start(context.Background(), Chan(in), Options{})
	require.NoError(t, err)
	defer w.Close()
	st := w.Status()
	assert.Equal(t, "r1", st.Revision)
	assert.False(t, st.Applied.Before(before))
	assert.Nil(t, st.Rejected)

	in <- Version{Config: withWeight(-5), Revision: "r2"}
	require.Eventually(t, func() bool { return w.Status().Rejected != nil }, 5*time.Second, time.Millisecond)
	st = w.Status()
	assert.Equal(t, "r1", st.Revision, "the refused version changes nothing in force")
	require.NotNil(t, st.Rejected)
	assert.Equal(t, "r2", st.Rejected.Revision)
	assert.ErrorIs(t, st.Rejected.Err, ErrInvalidConfig)
	assert.True(t, st.Rejected.Latest)
	assert.False(t, st.Rejected.At.Before(st.Applied))

	in <- Version{Config: withWeight(3), Revision: "r3"}
	require.Eventually(t, func() bool { return w.Status().Revision == "r3" }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return !w.Status().Rejected.Latest }, 5*time.Second, time.Millisecond)
	st = w.Status()
	assert.Equal(t, "r2", st.Rejected.Revision, "the last refusal stays on record")

	in <- Version{Err: errors.New("config file: no such file")}
	require.Eventually(t, func() bool { return w.Status().Rejected.Revision == "" }, 5*time.Second, time.Millisecond)
	assert.True(t, w.Status().Rejected.Latest)
	in <- Version{Config: withWeight(3), Revision: "r3"}
	require.Eventually(t, func() bool { return !w.Status().Rejected.Latest }, 5*time.Second, time.Millisecond,
		"the version in force came back unchanged: the refusal is no longer the latest word")
}

// A fixed document ends after its one version: that is no news at Info. A
// source that was meant to go on and ends is.
func TestSourceEndLoggedOnlyWhenUnexpected(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	w, err := Start(context.Background(), Static(validBase()), Options{Logger: zap.New(core)})
	require.NoError(t, err)
	<-w.done
	require.NoError(t, w.Close())
	assert.Zero(t, logs.FilterMessage("config source ended; keeping the last good configuration").Len())

	in := make(chan Version, 1)
	in <- Version{Config: validBase(), Revision: "r1"}
	w, err = Start(context.Background(), Chan(in), Options{Logger: zap.New(core)})
	require.NoError(t, err)
	close(in)
	<-w.done
	require.NoError(t, w.Close())
	assert.Equal(t, 1, logs.FilterMessage("config source ended; keeping the last good configuration").Len())
}
