// Package lanetest is the conformance suite of lane.Registry: one set of
// tests that every implementation runs, so that a consumer behaves the same
// on the in-memory registry of its unit tests and on the networked one of
// its fleet.
//
// An implementation's test calls Run with a Harness that makes fresh
// registries:
//
//	func TestConformance(t *testing.T) {
//		lanetest.Run(t, lanetest.Harness{
//			New: func(t *testing.T) lane.Registry { ... },
//			TTL: time.Second, Slack: 2 * time.Second,
//		})
//	}
//
// The suite checks what the consumer relies on: registration, listing and
// validation; renewal that keeps an instance and expiry that removes it
// within its TTL plus the store's slack; release and replacement (a newer
// registration of the same instance ends the older lease); watches that
// start with the current state, follow every change with growing
// revisions and never go back; the snapshot a watch reaches again after its
// registry lost and regained its store; many instances registering and
// leaving at once from several handles on one store; and contexts honoured.
//
// Timing: the suite runs on the wall clock, since a networked store expires
// leases on its own clock. Every wait is bounded by the harness's TTL and
// Slack, generously, so a loaded machine slows the suite down without
// failing it.
package lanetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/lane"
)

// Harness tells Run how to make registries of one implementation.
type Harness struct {
	// New returns an empty registry (no instance of any group the suite
	// uses). The harness closes it with t.Cleanup if it needs closing.
	New func(t *testing.T) lane.Registry
	// Peer returns another handle on the store behind reg, as a second
	// process would have (its own connection). Nil means reg itself, as
	// for a registry that lives in one process.
	Peer func(t *testing.T, reg lane.Registry) lane.Registry
	// TTL is a short lease the registry honours, used by the expiry tests.
	// It must be at least the store's smallest lease (an etcd lease is
	// whole seconds).
	TTL time.Duration
	// Slack is how long past TTL an expired instance may still be seen,
	// as the store checks leases on its own tick (etcd: every 500 ms, and
	// a revoke goes through consensus).
	Slack time.Duration
	// Disconnect cuts reg from its store, as a network partition would,
	// and returns the function that heals it. Nil skips the reconnect
	// tests (a registry with no store to lose).
	Disconnect func(t *testing.T, reg lane.Registry) (heal func())
}

func (h Harness) peer(t *testing.T, reg lane.Registry) lane.Registry {
	if h.Peer == nil {
		return reg
	}
	return h.Peer(t, reg)
}

// wait bounds every wait for a change the suite made: the change itself
// is quick, but a loaded machine may be slow to show it.
const wait = 10 * time.Second

// Run runs the suite as subtests of t.
func Run(t *testing.T, h Harness) {
	require.NotNil(t, h.New, "Harness.New")
	require.Positive(t, h.TTL, "Harness.TTL")
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"RegisterListsInstancesAndLanes", testRegisterLists},
		{"RejectsBadInstances", testRejectsBad},
		{"RenewKeepsAndExpiryRemoves", testRenewAndExpire},
		{"ReleaseAndReplace", testReleaseAndReplace},
		{"WatchStartsWithStateAndFollowsChanges", testWatchOrder},
		{"WatchSeesExpiryWithoutCalls", testWatchExpiry},
		{"WatchIsPerGroupAndEndsWithContext", testWatchScope},
		{"SnapshotAfterReconnect", testReconnect},
		{"ConcurrentInstances", testConcurrent},
		{"ContextIsHonoured", testContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// group gives each test its own group, so that a store shared between the
// subtests (one etcd for the whole suite) does not mix them.
func group(t *testing.T) string {
	return "g-" + sanitize(t.Name())
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

func instance(group, ln, id string) lane.Instance {
	return lane.Instance{Group: group, Lane: ln, ID: id, Addr: "127.0.0.1:" + fmt.Sprint(10000+len(id)),
		Meta: map[string]string{"zone": "dc1", "id": id}}
}

func ids(ins []lane.Instance) []string {
	out := make([]string, 0, len(ins))
	for _, in := range ins {
		out = append(out, in.ID)
	}
	return out
}

// members flattens a snapshot to "lane/id" strings, sorted.
func members(s lane.Snapshot) []string {
	var out []string
	for ln, ins := range s.Instances {
		for _, in := range ins {
			out = append(out, ln+"/"+in.ID)
		}
	}
	slices.Sort(out)
	return out
}

func testRegisterLists(t *testing.T, h Harness) {
	ctx := context.Background()
	r := h.New(t)
	g := group(t)
	for _, in := range []lane.Instance{instance(g, "a", "2"), instance(g, "a", "1"), instance(g, "", "b"), instance(g, "a.x", "x")} {
		l, err := r.Register(ctx, in, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, in, l.Instance())
		assert.GreaterOrEqual(t, l.TTL(), time.Minute, "a registry may round a TTL up, never down")
		t.Cleanup(func() { _ = l.Release(context.Background()) })
	}
	ins, err := r.Instances(ctx, g, "a")
	require.NoError(t, err)
	assert.Equal(t, []string{"1", "2"}, ids(ins), "instances sorted by id")
	assert.Equal(t, instance(g, "a", "1"), ins[0], "address and meta kept")
	lanes, err := r.Lanes(ctx, g)
	require.NoError(t, err)
	assert.Equal(t, []string{"", "a", "a.x"}, lanes)
	s, err := r.Snapshot(ctx, g)
	require.NoError(t, err)
	assert.Equal(t, g, s.Group)
	assert.Equal(t, []string{"/b", "a.x/x", "a/1", "a/2"}, members(s))
	assert.True(t, s.Live("a.x"))
	assert.False(t, s.Live("a.y"))

	empty, err := r.Snapshot(ctx, g+"-none")
	require.NoError(t, err)
	assert.Empty(t, empty.Instances)
	none, err := r.Instances(ctx, g, "zzz")
	require.NoError(t, err)
	assert.Empty(t, none)

	// The snapshot is the caller's: changing it changes nothing stored.
	s.Instances["a"][0].Meta["zone"] = "changed"
	again, err := r.Instances(ctx, g, "a")
	require.NoError(t, err)
	assert.Equal(t, "dc1", again[0].Meta["zone"])
}

func testRejectsBad(t *testing.T, h Harness) {
	ctx := context.Background()
	r := h.New(t)
	g := group(t)
	bad := map[string]lane.Instance{
		"no group":      {Lane: "a", ID: "1", Addr: "h:1"},
		"no id":         {Group: g, Lane: "a", Addr: "h:1"},
		"no address":    {Group: g, Lane: "a", ID: "1"},
		"malformed":     {Group: g, Lane: "A..b", ID: "1", Addr: "h:1"},
		"lane too deep": {Group: g, Lane: "a.b.c.d.e.f.g.h.i", ID: "1", Addr: "h:1"},
	}
	for name, in := range bad {
		_, err := r.Register(ctx, in, time.Minute)
		assert.ErrorIs(t, err, lane.ErrInvalidInstance, name)
	}
	_, err := r.Register(ctx, instance(g, "a", "1"), 0)
	assert.ErrorIs(t, err, lane.ErrInvalidInstance, "zero TTL")
	_, err = r.Register(ctx, instance(g, "a", "1"), -time.Second)
	assert.ErrorIs(t, err, lane.ErrInvalidInstance, "negative TTL")
	lanes, err := r.Lanes(ctx, g)
	require.NoError(t, err)
	assert.Empty(t, lanes, "nothing bad was stored")
}

func testRenewAndExpire(t *testing.T, h Harness) {
	ctx := context.Background()
	r := h.New(t)
	g := group(t)
	kept, err := r.Register(ctx, instance(g, "a", "kept"), h.TTL)
	require.NoError(t, err)
	left, err := r.Register(ctx, instance(g, "a", "left"), h.TTL)
	require.NoError(t, err)
	ttl := kept.TTL()
	require.GreaterOrEqual(t, ttl, h.TTL)

	// Renew "kept" at a third of its TTL for twice the time "left" may
	// live, as a consumer does; "left" is never renewed.
	deadline := time.Now().Add(2*left.TTL() + h.Slack)
	for time.Now().Before(deadline) {
		require.NoError(t, kept.Renew(ctx))
		time.Sleep(ttl / 3)
	}
	ins, err := r.Instances(ctx, g, "a")
	require.NoError(t, err)
	assert.Equal(t, []string{"kept"}, ids(ins), "the renewed instance stays, the other expired")
	assert.ErrorIs(t, left.Renew(ctx), lane.ErrLeaseExpired)
	assert.NoError(t, left.Release(ctx), "releasing an expired lease is no error")

	// Stop renewing: the instance goes within TTL plus the store's slack.
	stopped := time.Now()
	require.Eventually(t, func() bool {
		ins, err := r.Instances(ctx, g, "a")
		return err == nil && len(ins) == 0
	}, ttl+h.Slack+wait, 10*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(stopped), ttl/2, "an instance lives about its TTL after its last renewal")
	assert.ErrorIs(t, kept.Renew(ctx), lane.ErrLeaseExpired)
}

func testReleaseAndReplace(t *testing.T, h Harness) {
	ctx := context.Background()
	r := h.New(t)
	p := h.peer(t, r)
	g := group(t)
	old, err := r.Register(ctx, instance(g, "a", "1"), time.Minute)
	require.NoError(t, err)
	// The same instance comes back in another lane (a restart, or a
	// reload that moved it) before its old lease ran out, through another
	// handle, as a restarted process would.
	cur, err := p.Register(ctx, instance(g, "a.x", "1"), time.Minute)
	require.NoError(t, err)
	assert.ErrorIs(t, old.Renew(ctx), lane.ErrLeaseExpired, "a replaced lease is over")
	require.NoError(t, old.Release(ctx), "releasing a replaced lease is no error")
	lanes, err := r.Lanes(ctx, g)
	require.NoError(t, err)
	assert.Equal(t, []string{"a.x"}, lanes, "releasing the old lease left its successor")
	require.NoError(t, cur.Renew(ctx))

	other, err := r.Register(ctx, instance(g, "a", "2"), time.Minute)
	require.NoError(t, err)
	require.NoError(t, cur.Release(ctx))
	require.NoError(t, cur.Release(ctx), "releasing twice is no error")
	assert.ErrorIs(t, cur.Renew(ctx), lane.ErrLeaseExpired)
	s, err := p.Snapshot(ctx, g)
	require.NoError(t, err)
	assert.Equal(t, []string{"a/2"}, members(s), "release removes at once")
	require.NoError(t, other.Release(ctx))
	lanes, err = p.Lanes(ctx, g)
	require.NoError(t, err)
	assert.Empty(t, lanes)
}

// watcher reads a watch channel in the background and keeps every
// snapshot, so a test can wait for a state and check the whole sequence.
type watcher struct {
	mu    sync.Mutex
	seen  []lane.Snapshot
	done  chan struct{}
	cond  chan struct{} // closed and replaced on every snapshot
	ended bool
}

func watch(t *testing.T, ctx context.Context, r lane.Registry, g string) *watcher {
	t.Helper()
	ch, err := r.Watch(ctx, g)
	require.NoError(t, err)
	w := &watcher{done: make(chan struct{}), cond: make(chan struct{})}
	go func() {
		defer close(w.done)
		for s := range ch {
			w.mu.Lock()
			w.seen = append(w.seen, s)
			close(w.cond)
			w.cond = make(chan struct{})
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.ended = true
		close(w.cond)
		w.mu.Unlock()
	}()
	return w
}

// until waits for a snapshot that satisfies ok and returns it.
func (w *watcher) until(t *testing.T, what string, timeout time.Duration, ok func(lane.Snapshot) bool) lane.Snapshot {
	t.Helper()
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		// Only the latest state counts: an older one that matched was
		// already replaced.
		if n := len(w.seen); n > 0 && ok(w.seen[n-1]) {
			s := w.seen[n-1]
			w.mu.Unlock()
			return s
		}
		ended, cond := w.ended, w.cond
		w.mu.Unlock()
		if ended {
			t.Fatalf("watch ended before %s", what)
		}
		select {
		case <-cond:
		case <-deadline:
			w.mu.Lock()
			last := lane.Snapshot{}
			if len(w.seen) > 0 {
				last = w.seen[len(w.seen)-1]
			}
			w.mu.Unlock()
			t.Fatalf("no snapshot with %s within %v; last: %v", what, timeout, members(last))
		}
	}
}

func (w *watcher) all() []lane.Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

// checkRevisions asserts that every snapshot is newer than the one before:
// a watch never goes back, and never repeats a state as a new one.
func checkRevisions(t *testing.T, seen []lane.Snapshot) {
	t.Helper()
	for i := 1; i < len(seen); i++ {
		assert.Greater(t, seen[i].Revision, seen[i-1].Revision, "snapshot %d of %d: revisions must grow", i, len(seen))
	}
}

func has(want ...string) func(lane.Snapshot) bool {
	slices.Sort(want)
	return func(s lane.Snapshot) bool { return slices.Equal(members(s), want) }
}

func testWatchOrder(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := h.New(t)
	p := h.peer(t, r)
	g := group(t)
	base, err := p.Register(ctx, instance(g, "", "b"), time.Minute)
	require.NoError(t, err)

	w := watch(t, ctx, r, g)
	first := w.until(t, "the state before the watch", wait, has("/b"))
	assert.Equal(t, g, first.Group)

	x, err := p.Register(ctx, instance(g, "a.x", "x"), time.Minute)
	require.NoError(t, err)
	w.until(t, "a.x registered", wait, has("/b", "a.x/x"))
	a, err := p.Register(ctx, instance(g, "a", "a1"), time.Minute)
	require.NoError(t, err)
	w.until(t, "a registered", wait, has("/b", "a.x/x", "a/a1"))
	require.NoError(t, x.Release(ctx))
	s := w.until(t, "a.x released", wait, has("/b", "a/a1"))
	target, level := lane.Resolve("a.x", s)
	assert.Equal(t, "a", target, "a.x falls back to a once released")
	assert.Equal(t, 1, level)
	// A move of one instance to another lane is one change.
	_, err = p.Register(ctx, instance(g, "a.y", "a1"), time.Minute)
	require.NoError(t, err)
	w.until(t, "a1 moved to a.y", wait, has("/b", "a.y/a1"))
	require.NoError(t, base.Release(ctx))
	last := w.until(t, "base released", wait, has("a.y/a1"))
	_ = a.Release(ctx)

	seen := w.all()
	checkRevisions(t, seen)
	now, err := r.Snapshot(ctx, g)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, now.Revision, last.Revision, "Snapshot is never older than what a watch delivered")
}

func testWatchExpiry(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := h.New(t)
	p := h.peer(t, r)
	g := group(t)
	w := watch(t, ctx, r, g)
	w.until(t, "the empty group", wait, has())
	_, err := p.Register(ctx, instance(g, "a.x", "x"), h.TTL)
	require.NoError(t, err)
	w.until(t, "a.x registered", wait, has("a.x/x"))
	registered := time.Now()
	// Nobody calls the registry now: the store's expiry alone must reach
	// the watcher.
	w.until(t, "a.x expired", h.TTL+h.Slack+wait, has())
	assert.GreaterOrEqual(t, time.Since(registered), h.TTL/2)
	checkRevisions(t, w.all())
}

func testWatchScope(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	r := h.New(t)
	p := h.peer(t, r)
	g := group(t)
	w := watch(t, ctx, r, g)
	w.until(t, "the empty group", wait, has())
	// Another group's changes, and a group whose name extends this one's,
	// are not this group's.
	for _, other := range []string{g + "-other", g + "x"} {
		l, err := p.Register(ctx, instance(other, "", "o"), time.Minute)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Release(context.Background()) })
	}
	l, err := p.Register(ctx, instance(g, "", "mine"), time.Minute)
	require.NoError(t, err)
	defer func() { _ = l.Release(context.Background()) }()
	w.until(t, "this group's instance", wait, has("/mine"))
	for _, s := range w.all() {
		assert.Equal(t, g, s.Group)
		for _, m := range members(s) {
			assert.Equal(t, "/mine", m, "only this group's instances")
		}
	}
	cancel()
	select {
	case <-w.done:
	case <-time.After(wait):
		t.Fatal("the watch channel stays open after its context ended")
	}
}

func testReconnect(t *testing.T, h Harness) {
	if h.Disconnect == nil || h.Peer == nil {
		t.Skip("the registry has no store to lose")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := h.New(t)
	p := h.peer(t, r)
	g := group(t)
	stay, err := p.Register(ctx, instance(g, "", "stay"), time.Minute)
	require.NoError(t, err)
	gone, err := p.Register(ctx, instance(g, "a", "gone"), time.Minute)
	require.NoError(t, err)
	w := watch(t, ctx, r, g)
	before := w.until(t, "the group before the cut", wait, has("/stay", "a/gone"))

	heal := h.Disconnect(t, r)
	// While r is cut off, the group changes several times.
	require.NoError(t, gone.Release(ctx))
	for i := range 3 {
		_, err := p.Register(ctx, instance(g, "a.x", fmt.Sprint("new", i)), time.Minute)
		require.NoError(t, err)
	}
	moved, err := p.Register(ctx, instance(g, "b", "stay"), time.Minute)
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	w.mu.Lock()
	cut := len(w.seen)
	w.mu.Unlock()
	heal()

	after := w.until(t, "the group after the cut", wait+h.Slack, has("b/stay", "a.x/new0", "a.x/new1", "a.x/new2"))
	assert.Greater(t, after.Revision, before.Revision)
	now, err := p.Snapshot(ctx, g)
	require.NoError(t, err)
	assert.Equal(t, members(now), members(after), "the watch caught up with the store")
	seen := w.all()
	checkRevisions(t, seen)
	assert.GreaterOrEqual(t, len(seen), cut)
	_ = stay.Release(ctx)
	_ = moved.Release(ctx)
}

func testConcurrent(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := h.New(t)
	p := h.peer(t, r)
	g := group(t)
	w := watch(t, ctx, r, g)
	const n = 16
	lanes := []string{"", "a", "a.x", "b"}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		leases = map[string]lane.Lease{}
		want   []string
		errs   []error
	)
	for i := range n {
		reg := r
		if i%2 == 1 {
			reg = p
		}
		in := instance(g, lanes[i%len(lanes)], fmt.Sprintf("i%02d", i))
		want = append(want, in.Lane+"/"+in.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := reg.Register(ctx, in, time.Minute)
			if err == nil {
				for range 3 {
					if err = l.Renew(ctx); err != nil {
						break
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			leases[in.ID] = l
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	w.until(t, "every instance", wait, has(want...))
	s, err := p.Snapshot(ctx, g)
	require.NoError(t, err)
	assert.Equal(t, len(want), len(members(s)))

	// Half leave at once, the other half stay.
	var stay []string
	for i := range n {
		id := fmt.Sprintf("i%02d", i)
		if i%4 < 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := leases[id].Release(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
			continue
		}
		stay = append(stay, lanes[i%len(lanes)]+"/"+id)
	}
	wg.Wait()
	require.Empty(t, errs)
	w.until(t, "the half that stayed", wait, has(stay...))
	checkRevisions(t, w.all())
	for _, l := range leases {
		_ = l.Release(ctx)
	}
	w.until(t, "nobody", wait, has())
}

func testContext(t *testing.T, h Harness) {
	r := h.New(t)
	g := group(t)
	live, err := r.Register(context.Background(), instance(g, "", "1"), time.Minute)
	require.NoError(t, err)
	defer func() { _ = live.Release(context.Background()) }()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"Register":  func() error { _, err := r.Register(ctx, instance(g, "", "2"), time.Minute); return err },
		"Instances": func() error { _, err := r.Instances(ctx, g, ""); return err },
		"Lanes":     func() error { _, err := r.Lanes(ctx, g); return err },
		"Snapshot":  func() error { _, err := r.Snapshot(ctx, g); return err },
		"Watch":     func() error { _, err := r.Watch(ctx, g); return err },
		"Renew":     func() error { return live.Renew(ctx) },
	}
	for name, call := range calls {
		err := call()
		assert.True(t, errors.Is(err, context.Canceled), "%s with a cancelled context: %v", name, err)
	}
	ins, err := r.Instances(context.Background(), g, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"1"}, ids(ins), "nothing changed by the cancelled calls")
}
