package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLimiterWakesWaiters: a full limiter holds acquire and waitFree until
// a release or a raised limit, and waking one round of waiters leaves the
// next round working the same way.
func TestLimiterWakesWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	l := newLimiter(1)
	require.NoError(t, l.acquire(ctx))
	for round := 0; round < 3; round++ {
		got := make(chan error, 1)
		go func() { got <- l.acquire(ctx) }()
		select {
		case <-got:
			t.Fatal("acquire passed a full limiter")
		case <-time.After(20 * time.Millisecond):
		}
		l.release(1)
		require.NoError(t, <-got, "round %d", round)
	}

	free := make(chan int, 1)
	go func() {
		n, _ := l.waitFree(ctx)
		free <- n
	}()
	select {
	case <-free:
		t.Fatal("waitFree passed a full limiter")
	case <-time.After(20 * time.Millisecond):
	}
	l.setLimit(3)
	assert.Equal(t, 2, <-free)

	l.take(2)
	short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	defer stop()
	assert.ErrorIs(t, l.acquire(short), context.DeadlineExceeded)
	assert.Equal(t, 3, l.inUse())
}
