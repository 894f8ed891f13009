package batch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBudgetWakesAllThatFit(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	require.NoError(t, b.acquire(ctx, 100, false))
	order := make(chan int64, 3)
	var wg sync.WaitGroup
	for i, n := range []int64{60, 30, 10} {
		wg.Go(func() {
			require.NoError(t, b.acquire(ctx, n, false))
			order <- n
		})
		waitUntil(t, func() bool { return b.nwait.Load() == int32(i+1) }, "waiter queued")
	}
	assert.ErrorIs(t, b.acquire(ctx, 1, true), ErrBufferFull, "fail-fast does not jump the queue")
	b.release(100)
	wg.Wait()
	close(order)
	var got []int64
	for n := range order {
		got = append(got, n)
	}
	assert.ElementsMatch(t, []int64{60, 30, 10}, got, "one release wakes every waiter that fits")
	assert.EqualValues(t, 100, b.used.Load())
	assert.Zero(t, b.nwait.Load())
}

func TestBudgetCloseFailsWaiters(t *testing.T) {
	b := newBudget(10)
	ctx := context.Background()
	require.NoError(t, b.acquire(ctx, 10, false))
	errc := make(chan error, 1)
	go func() { errc <- b.acquire(ctx, 5, false) }()
	waitUntil(t, func() bool { return b.nwait.Load() == 1 }, "waiter queued")
	b.close()
	assert.ErrorIs(t, recv(t, errc), ErrClosed)
	assert.ErrorIs(t, b.acquire(ctx, 5, false), ErrClosed)
	assert.EqualValues(t, 10, b.used.Load())
}

func TestBudgetLoweredLimitFailsHugeWaiter(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	require.NoError(t, b.acquire(ctx, 50, false))
	errc := make(chan error, 1)
	go func() { errc <- b.acquire(ctx, 80, false) }()
	waitUntil(t, func() bool { return b.nwait.Load() == 1 }, "waiter queued")
	b.setLimit(60)
	assert.ErrorIs(t, recv(t, errc), ErrTooLarge)
	assert.Zero(t, b.nwait.Load())
}

// An Add checks its size against the cap it saw; if SetLimits lowered the
// cap in between, the item must fail with ErrTooLarge instead of queueing at
// the head, where it would never fit and would starve every waiter behind it.
func TestBudgetItemOverLoweredLimitDoesNotBlockQueue(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	require.NoError(t, b.acquire(ctx, 50, false))
	b.setLimit(60)

	huge := make(chan error, 1)
	go func() { huge <- b.acquire(ctx, 80, false) }()
	assert.ErrorIs(t, recv(t, huge), ErrTooLarge, "an item over the lowered cap fails at once")
	assert.ErrorIs(t, b.acquire(ctx, 80, true), ErrTooLarge, "fail-fast says too large, not full")

	small := make(chan error, 1)
	go func() { small <- b.acquire(ctx, 20, false) }()
	waitUntil(t, func() bool { return b.nwait.Load() == 1 }, "small waiter queued")
	b.release(50)
	assert.NoError(t, recv(t, small), "the waiter behind is served")
	assert.EqualValues(t, 20, b.used.Load())
	assert.Zero(t, b.nwait.Load())
}

func TestBudgetStress(t *testing.T) {
	b := newBudget(1000)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%50)*time.Microsecond)
				n := int64(1 + (g*31+i*17)%400)
				if b.acquire(ctx, n, false) == nil {
					assert.LessOrEqual(t, b.used.Load(), int64(1000))
					b.release(n)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, b.used.Load())
	assert.Zero(t, b.nwait.Load())
	assert.Empty(t, b.waiters)
}
