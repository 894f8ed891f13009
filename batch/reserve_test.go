package batch

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Reserve shares TotalBatchMaxBytes with buffered items: a reservation
// holds items back until it is released, and a release given twice counts
// once.
func TestReserveSharesTheCap(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{Limits: Limits{BatchMaxBytes: 100, TotalBatchMaxBytes: 100}}, rec.flush)
	ctx := context.Background()

	release, err := a.Reserve(ctx, 80)
	require.NoError(t, err)
	require.EqualValues(t, 80, a.BufferedBytes())

	// An item that does not fit beside the reservation waits for it.
	done := make(chan outcome, 1)
	go func() {
		v, err := a.Add(ctx, "k", 7, 30)
		done <- outcome{v, err}
	}()
	waitUntil(t, func() bool { return a.budget.nwait.Load() == 1 }, "the item to wait for space")
	release()
	release()
	out := recv(t, done)
	require.NoError(t, out.err)
	require.EqualValues(t, 0, a.BufferedBytes(), "the second release gave nothing back")

	_, err = a.Reserve(ctx, 101)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = a.Reserve(ctx, -1)
	require.ErrorIs(t, err, ErrInvalidSize)

	// A reservation waiting for space gives up with its context.
	hold, err := a.Reserve(ctx, 100)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Reserve(cctx, 1)
		errc <- err
	}()
	waitUntil(t, func() bool { return a.budget.nwait.Load() == 1 }, "the reservation to wait")
	cancel()
	require.ErrorIs(t, recv(t, errc), context.Canceled)
	hold()
	require.EqualValues(t, 0, a.BufferedBytes())

	require.NoError(t, a.Close(ctx))
	_, err = a.Reserve(ctx, 1)
	require.ErrorIs(t, err, ErrClosed)
}

// With FailFast a reservation that does not fit fails at once.
func TestReserveFailFast(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{Limits: Limits{BatchMaxBytes: 100, TotalBatchMaxBytes: 100}, FailFast: true}, rec.flush)
	release, err := a.Reserve(context.Background(), 60)
	require.NoError(t, err)
	_, err = a.Reserve(context.Background(), 60)
	require.ErrorIs(t, err, ErrBufferFull)
	release()
	_, err = a.Reserve(context.Background(), 60)
	require.NoError(t, err)
}

// The ticker sleeps once no key has state and wakes when one is added: a
// lingering item added after a long idle spell still leaves on the timer.
func TestTickerSleepsWhileIdle(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{Limits: Limits{MaxDelay: 5 * time.Millisecond}, Linger: true}, rec.flush)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for round := range 2 {
		start := time.Now()
		_, err := a.Add(ctx, "k", round, 1)
		require.NoError(t, err)
		require.Less(t, time.Since(start), time.Second, "the timer flushed the lingering item")
		waitUntil(t, a.asleep.Load, "the ticker to sleep once the key's state is dropped")
	}
	require.Equal(t, 2, rec.itemCount())
}

// When every item leaves at once (one synchronous sender) the ticker
// relaxes instead of waking every MaxDelay/2; an item that then has to
// wait in a busy key's buffer wakes it, and still leaves by MaxDelay, not
// at the relaxed pace.
func TestTickerRelaxesWhileNothingWaits(t *testing.T) {
	rec := newRecorder()
	a := newAcc(t, Config{Limits: Limits{MaxDelay: 10 * time.Millisecond}, MaxInflightPerKey: 2}, rec.flush)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for i := range 5 {
		_, err := a.Add(ctx, "k", i, 1)
		require.NoError(t, err)
	}
	waitUntil(t, a.relaxed.Load, "the ticker to relax")
	require.False(t, a.asleep.Load(), "the key still has state")

	// A flush that holds its slot: the next item finds the key busy with
	// a slot free, so it waits for the timer.
	rec.mu.Lock()
	rec.gate = make(chan struct{}, 2)
	rec.mu.Unlock()
	released := false
	release := func() {
		if !released {
			released = true
			rec.gate <- struct{}{}
			rec.gate <- struct{}{}
		}
	}
	defer release()
	first := asyncAdd(t, a, ctx, "k", 100, 1)
	waitUntil(t, func() bool { return pendingLen(a, "k") == 0 }, "the first item to leave")
	start := time.Now()
	second := asyncAdd(t, a, ctx, "k", 101, 1)
	waitUntil(t, func() bool { return pendingLen(a, "k") == 0 }, "the timer to start the waiting item")
	require.Less(t, time.Since(start), idleTick*3/4, "a waiting item leaves by MaxDelay, not at the relaxed pace")
	release()
	require.NoError(t, recv(t, first).err)
	require.NoError(t, recv(t, second).err)
}
