package lane

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a manual Clock: timers fire inside Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves time forward and runs, in this goroutine, every timer due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

func inst(group, lane, id string) Instance {
	return Instance{Group: group, Lane: lane, ID: id, Addr: "127.0.0.1:1", Meta: map[string]string{"v": "1"}}
}

func TestRegisterListsInstancesAndLanes(t *testing.T) {
	ctx := context.Background()
	r := NewMemoryRegistry(MemoryOptions{Clock: newFakeClock()})
	defer r.Close()
	for _, in := range []Instance{inst("g", "", "b1"), inst("g", "a", "a2"), inst("g", "a", "a1"), inst("h", "z", "z1")} {
		_, err := r.Register(ctx, in, time.Second)
		require.NoError(t, err)
	}
	lanes, err := r.Lanes(ctx, "g")
	require.NoError(t, err)
	assert.Equal(t, []string{"", "a"}, lanes)
	ins, err := r.Instances(ctx, "g", "a")
	require.NoError(t, err)
	require.Len(t, ins, 2)
	assert.Equal(t, "a1", ins[0].ID)
	assert.Equal(t, "a2", ins[1].ID)
	ins[0].Meta["v"] = "changed"
	again, _ := r.Instances(ctx, "g", "a")
	assert.Equal(t, "1", again[0].Meta["v"], "callers get copies")
	none, err := r.Instances(ctx, "g", "nope")
	require.NoError(t, err)
	assert.Empty(t, none)
}

func TestRegisterRejectsBadInstances(t *testing.T) {
	ctx := context.Background()
	r := NewMemoryRegistry(MemoryOptions{})
	defer r.Close()
	for _, in := range []Instance{
		{Lane: "a", ID: "1", Addr: "x:1"},
		{Group: "g", Lane: "a", Addr: "x:1"},
		{Group: "g", Lane: "a", ID: "1"},
		{Group: "g", Lane: "A", ID: "1", Addr: "x:1"},
	} {
		_, err := r.Register(ctx, in, time.Second)
		assert.ErrorIs(t, err, ErrInvalidInstance, "%+v", in)
	}
	_, err := r.Register(ctx, inst("g", "a", "1"), 0)
	assert.ErrorIs(t, err, ErrInvalidInstance)
	_, err = r.Register(ctx, inst("g", "A", "1"), time.Second)
	assert.ErrorIs(t, err, ErrMalformedLane)
}

func TestLeaseExpiresByTTLAndRenewExtends(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	r := NewMemoryRegistry(MemoryOptions{Clock: clk})
	defer r.Close()
	l1, err := r.Register(ctx, inst("g", "a", "1"), 10*time.Second)
	require.NoError(t, err)
	_, err = r.Register(ctx, inst("g", "a", "2"), 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, l1.TTL())
	assert.Equal(t, "1", l1.Instance().ID)

	clk.Advance(6 * time.Second)
	require.NoError(t, l1.Renew(ctx))
	clk.Advance(6 * time.Second) // 2 is 12 s old, 1 was renewed 6 s ago
	ins, err := r.Instances(ctx, "g", "a")
	require.NoError(t, err)
	require.Len(t, ins, 1)
	assert.Equal(t, "1", ins[0].ID)

	clk.Advance(4 * time.Second)
	ins, _ = r.Instances(ctx, "g", "a")
	assert.Empty(t, ins)
	assert.ErrorIs(t, l1.Renew(ctx), ErrLeaseExpired)
	assert.NoError(t, l1.Release(ctx), "releasing an expired lease is fine")
}

func TestReleaseAndReplace(t *testing.T) {
	ctx := context.Background()
	r := NewMemoryRegistry(MemoryOptions{Clock: newFakeClock()})
	defer r.Close()
	old, err := r.Register(ctx, inst("g", "a", "1"), time.Minute)
	require.NoError(t, err)
	// The same instance restarts in another lane before its lease ran out.
	cur, err := r.Register(ctx, inst("g", "a.x", "1"), time.Minute)
	require.NoError(t, err)
	assert.ErrorIs(t, old.Renew(ctx), ErrLeaseExpired)
	require.NoError(t, old.Release(ctx), "a replaced lease must not remove its successor")
	lanes, _ := r.Lanes(ctx, "g")
	assert.Equal(t, []string{"a.x"}, lanes)

	require.NoError(t, cur.Release(ctx))
	require.NoError(t, cur.Release(ctx))
	lanes, _ = r.Lanes(ctx, "g")
	assert.Empty(t, lanes)
}

func recv(t *testing.T, ch <-chan Snapshot) Snapshot {
	t.Helper()
	select {
	case s, ok := <-ch:
		require.True(t, ok, "watch channel closed")
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no snapshot")
	}
	return Snapshot{}
}

func TestWatchSeesRegisterReleaseAndExpiry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := newFakeClock()
	r := NewMemoryRegistry(MemoryOptions{Clock: clk})
	defer r.Close()

	ch, err := r.Watch(ctx, "g")
	require.NoError(t, err)
	s0 := recv(t, ch)
	assert.False(t, s0.Live(""))

	lb, err := r.Register(ctx, inst("g", "", "b"), time.Minute)
	require.NoError(t, err)
	s1 := recv(t, ch)
	assert.True(t, s1.Live(""))
	assert.Greater(t, s1.Revision, s0.Revision)

	_, err = r.Register(ctx, inst("g", "a.x", "x"), 5*time.Second)
	require.NoError(t, err)
	s2 := recv(t, ch)
	target, _ := Resolve("a.x", s2)
	assert.Equal(t, "a.x", target)

	// No call on the registry: the expiry timer alone must tell the watcher.
	clk.Advance(5 * time.Second)
	s3 := recv(t, ch)
	assert.False(t, s3.Live("a.x"))
	assert.Greater(t, s3.Revision, s2.Revision)
	target, level := Resolve("a.x", s3)
	assert.Equal(t, "", target)
	assert.Equal(t, 2, level)

	require.NoError(t, lb.Release(ctx))
	s4 := recv(t, ch)
	assert.Empty(t, s4.Instances)

	// Another group's changes are not delivered.
	_, err = r.Register(ctx, inst("other", "", "o"), time.Minute)
	require.NoError(t, err)
	select {
	case s := <-ch:
		t.Fatalf("unexpected snapshot %+v", s)
	default:
	}

	cancel()
	require.Eventually(t, func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond, "channel closes when ctx ends")
}

func TestWatchSlowReaderGetsLatest(t *testing.T) {
	ctx := context.Background()
	r := NewMemoryRegistry(MemoryOptions{Clock: newFakeClock()})
	ch, err := r.Watch(ctx, "g")
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		_, err := r.Register(ctx, inst("g", "a", fmt.Sprint(i)), time.Minute)
		require.NoError(t, err)
	}
	s := recv(t, ch)
	assert.Len(t, s.Instances["a"], 10, "the one buffered snapshot is the newest")
	require.NoError(t, r.Close())
	_, ok := <-ch
	assert.False(t, ok, "Close closes watch channels")
	_, err = r.Register(ctx, inst("g", "a", "z"), time.Minute)
	assert.ErrorIs(t, err, ErrRegistryClosed)
	_, err = r.Watch(ctx, "g")
	assert.ErrorIs(t, err, ErrRegistryClosed)
}

func TestContextIsHonoured(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := NewMemoryRegistry(MemoryOptions{})
	defer r.Close()
	_, err := r.Register(ctx, inst("g", "", "1"), time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = r.Lanes(ctx, "g")
	assert.ErrorIs(t, err, context.Canceled)
	_, err = r.Watch(ctx, "g")
	assert.ErrorIs(t, err, context.Canceled)
}

func TestRegistryConcurrentUse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewMemoryRegistry(MemoryOptions{}) // real clock: timers fire on their own goroutines
	defer r.Close()
	ch, err := r.Watch(ctx, "g")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range ch {
		}
	}()

	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			lanes := []string{"", "a", "a.x"}
			for i := 0; i < 200; i++ {
				l, err := r.Register(ctx, inst("g", lanes[i%3], fmt.Sprintf("w%d-%d", w, i%5)), time.Millisecond*time.Duration(1+i%3))
				if !assert.NoError(t, err) {
					return
				}
				_ = l.Renew(ctx)
				s, err := r.Snapshot(ctx, "g")
				assert.NoError(t, err)
				Resolve("a.x.y", s)
				_, _ = r.Lanes(ctx, "g")
				if i%2 == 0 {
					assert.NoError(t, l.Release(ctx))
				}
			}
		}(w)
	}
	wg.Wait()
	cancel()
	<-done
}
