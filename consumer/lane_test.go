package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/lane"
)

// laneSetup runs consumers of one group in base, "a" and "a.x", each
// receiving from all four brokers, sharing one lane registry.
type laneSetup struct {
	s   *sender
	rec *record
	cs  map[string]*Consumer
}

func startLanes(t *testing.T, topic, group string) *laneSetup {
	env := startEnv(t, topic)
	cfg := docFor(env, topic, group, config.Consumer{})
	reg := lane.NewMemoryRegistry(lane.MemoryOptions{})
	t.Cleanup(func() { _ = reg.Close() })
	ls := &laneSetup{s: newSender(t, env, topic), rec: newRecord(), cs: map[string]*Consumer{}}
	for _, ln := range []string{"", "a", "a.x"} {
		name := "base"
		if ln != "" {
			name = ln
		}
		ls.cs[name] = newConsumer(t, group, topic, ls.rec.handler(name),
			WithConfig(cfg), WithLane(ln), WithLaneRegistry(reg), WithForwardToken(testToken),
			WithInstanceName("lane-test-"+name))
	}
	// Wait until every consumer sees the three lanes, so the first
	// messages are routed with the full picture.
	deadline := time.Now().Add(waitLong)
	for _, c := range ls.cs {
		for {
			snap := c.lanes.state.Load().snap
			if snap.Live("") && snap.Live("a") && snap.Live("a.x") {
				break
			}
			require.True(t, time.Now().Before(deadline), "lanes never became visible")
			time.Sleep(10 * time.Millisecond)
		}
	}
	return ls
}

func TestLaneRouting(t *testing.T) {
	const topic, group = "lane_orders", "lane_group"
	ls := startLanes(t, topic, group)

	want := map[string]string{"a.x": "a.x", "a.y": "a", "b": "base", "": "base"}
	ids := map[string][]string{}
	var all []string
	for msgLane := range want {
		for cl := 0; cl < 2; cl++ {
			got := ls.s.send(cl, 10, msgLane)
			ids[msgLane] = append(ids[msgLane], got...)
			all = append(all, got...)
		}
	}
	ls.rec.waitHandled(t, all)
	waitIdle(t, ls.cs["base"], ls.cs["a"], ls.cs["a.x"])
	for msgLane, target := range want {
		for _, id := range ids[msgLane] {
			assert.Equal(t, []string{target}, ls.rec.handlers(id), "message %s of lane %q", id, msgLane)
		}
	}
	ls.rec.mu.Lock()
	assert.Empty(t, ls.rec.badLane, "handler ctx must carry the message's lane")
	ls.rec.mu.Unlock()
	t.Logf("duplicate handler runs: %d of %d messages", ls.rec.duplicates(), len(all))
}

// TestLaneFallbackWhenInstanceDies kills the only "a.x" consumer while
// "a.x" messages stream in: the ones after its departure must move to "a",
// none may be lost, and none may be handled by two lanes.
func TestLaneFallbackWhenInstanceDies(t *testing.T) {
	const topic, group = "lane_kill", "lane_kill_group"
	ls := startLanes(t, topic, group)

	var (
		mu  sync.Mutex
		ids []string
	)
	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < 40; i++ {
			select {
			case <-stop:
				return
			default:
			}
			got := ls.s.send(i%2, 5, "a.x")
			mu.Lock()
			ids = append(ids, got...)
			mu.Unlock()
			time.Sleep(25 * time.Millisecond)
		}
	}()
	// Let a.x take part of the stream, then close it mid-stream.
	deadline := time.Now().Add(waitLong)
	for {
		mu.Lock()
		n := len(ids)
		mu.Unlock()
		if n >= 60 {
			break
		}
		require.True(t, time.Now().Before(deadline), "producer stalled")
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	require.NoError(t, ls.cs["a.x"].Close(ctx))
	cancel()
	<-produced
	close(stop)

	mu.Lock()
	sent := append([]string(nil), ids...)
	mu.Unlock()
	ls.rec.waitHandled(t, sent)
	waitIdle(t, ls.cs["base"], ls.cs["a"])

	byLane := map[string]int{}
	for _, id := range sent {
		hs := ls.rec.handlers(id)
		require.Len(t, hs, 1, "message %s handled by %v: more than one lane", id, hs)
		byLane[hs[0]]++
	}
	t.Logf("a.x messages: %d sent; handled by lane: %v; duplicate handler runs: %d",
		len(sent), byLane, ls.rec.duplicates())
	assert.Positive(t, byLane["a.x"], "a.x handled part of the stream before it closed")
	assert.Positive(t, byLane["a"], "a took over after a.x closed")
	assert.Zero(t, byLane["base"], "a.x messages never fall past a while a lives")
}
