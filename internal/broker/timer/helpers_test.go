package timer

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fakeClock is a manual clock: time moves only by Advance.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
}

type fakeWaiter struct {
	at      time.Time
	ch      chan time.Time
	stopped bool
}

func newFakeClock(start time.Time) *fakeClock { return &fakeClock{now: start} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &fakeWaiter{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		w.ch <- c.now
		return w.ch, func() bool { return false }
	}
	c.waiters = append(c.waiters, w)
	return w.ch, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !w.stopped
		w.stopped = true
		return was
	}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		switch {
		case w.stopped:
		case !w.at.After(c.now):
			w.ch <- c.now
		default:
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// armed returns how many timers wait for a later time (neither fired nor
// stopped).
func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.waiters {
		if !w.stopped {
			n++
		}
	}
	return n
}

// delivery is one message the recorder received.
type delivery struct {
	id    string
	at    int64     // TIMER_DELIVER_MS
	when  time.Time // clock time of the Deliver call
	topic string
	queue int32
}

// recorder is a Deliverer that records every delivery, optionally appending
// it to a store (the broker's path) first.
type recorder struct {
	clock Clock
	st    *store.Store

	mu   sync.Mutex
	got  []delivery
	byID map[string]int
	off  bool // stop recording (a crashed instance)
}

func newRecorder(c Clock, st *store.Store) *recorder {
	return &recorder{clock: c, st: st, byID: map[string]int{}}
}

func (r *recorder) Deliver(ctx context.Context, m store.Message) error {
	if r.st != nil {
		if _, err := r.st.Append(ctx, []store.Message{m}); err != nil {
			return err
		}
	}
	when := r.clock.Now()
	at, err := strconv.ParseInt(m.Properties[PropDeliverAt], 10, 64)
	if err != nil {
		return fmt.Errorf("delivered message without %s: %v", PropDeliverAt, m.Properties)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.off {
		return nil
	}
	id := m.Properties["UNIQ_KEY"]
	r.got = append(r.got, delivery{id: id, at: at, when: when, topic: m.Topic, queue: m.QueueID})
	r.byID[id]++
	return nil
}

func (r *recorder) stop() {
	r.mu.Lock()
	r.off = true
	r.mu.Unlock()
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *recorder) snapshot() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

func (r *recorder) dups() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.byID {
		n += c - 1
	}
	return n
}

func openStore(t testing.TB, o store.Options) *store.Store {
	t.Helper()
	if o.SegmentSize == 0 {
		o.SegmentSize = 64 << 20
	}
	st, err := store.Open(testCtx(t), o)
	require.NoError(t, err)
	return st
}

func delayed(id string, topic string, q int32) store.Message {
	return store.Message{
		Topic: topic, QueueID: q, BornTimestamp: 1, BornHost: "127.0.0.1",
		Tag:        "t",
		Properties: map[string]string{"UNIQ_KEY": id, "k": "v"},
		Body:       []byte("body-" + id),
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// percentile of sorted durations, p in [0,1].
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }
