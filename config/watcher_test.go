package config

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func withWeight(w int) *Config {
	c := validBase()
	c.Topics["t"].Clusters[0].Weight = w
	return c
}

func reloads(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "twinmq_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestStartWithStatic(t *testing.T) {
	ctx := context.Background()
	src := validBase()
	w, err := Start(ctx, Static(src), Options{})
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, src, w.Current())
	assert.NotSame(t, src, w.Current(), "Static keeps its own copy")
	assert.NotEmpty(t, w.Revision())
	assert.NoError(t, w.LastError())
}

func TestStartFailsWithoutAGoodFirstVersion(t *testing.T) {
	ctx := context.Background()
	bad := validBase()
	bad.Timeouts.Request = 0
	_, err := Start(ctx, Static(bad), Options{})
	assert.ErrorIs(t, err, ErrInvalidConfig)

	in := make(chan Version)
	close(in)
	_, err = Start(ctx, Chan(in), Options{})
	assert.ErrorIs(t, err, ErrSourceEnded)

	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = Start(tctx, Chan(make(chan Version)), Options{})
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	readErr := errors.New("disk on fire")
	in = make(chan Version, 1)
	in <- Version{Err: readErr}
	_, err = Start(ctx, Chan(in), Options{})
	assert.ErrorIs(t, err, readErr)
	assert.ErrorIs(t, err, ErrInvalidConfig, "an unreadable first document leaves nothing to start on")

	_, err = Start(ctx, File(filepath.Join(t.TempDir(), "missing.json"), FileOptions{}), Options{})
	assert.ErrorIs(t, err, ErrInvalidConfig, "a missing file")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.NotContains(t, err.Error(), ErrInvalidConfig.Error(), "the text says what is wrong, not the class")
}

// A ctx that has already ended fails Start every time, even when the
// source has its first version ready at once (Static): the select between
// the two used to pick either, and Start succeeded about half the time.
func TestStartWithAnEndedContextAlwaysFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		w, err := Start(ctx, Static(validBase()), Options{})
		if err == nil {
			_ = w.Close()
			t.Fatalf("Start succeeded with a cancelled ctx (call %d)", i)
		}
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrInvalidConfig, "a cancelled ctx is not a bad configuration")
	}
}

func TestWatcherAcceptsRejectsAndNotifies(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.InfoLevel)
	in := make(chan Version)
	first := withWeight(1)
	go func() { in <- Version{Config: first, Revision: "r1"} }()
	w, err := Start(ctx, Chan(in), Options{Logger: zap.New(core), Registerer: reg})
	require.NoError(t, err)
	defer w.Close()

	type call struct{ old, new *Config }
	calls := make(chan call, 10)
	cur, cancel := w.Subscribe(func(old, new *Config) { calls <- call{old, new} })
	assert.Same(t, first, cur)

	// A valid new version is swapped in and announced with its predecessor.
	second := withWeight(2)
	in <- Version{Config: second, Revision: "r2"}
	c := <-calls
	assert.Same(t, first, c.old)
	assert.Same(t, second, c.new)
	assert.Same(t, second, w.Current())
	assert.Equal(t, "r2", w.Revision())

	// An invalid version and an unreadable one are rejected; r2 keeps serving.
	bad := withWeight(-5)
	in <- Version{Config: bad, Revision: "r3"}
	in <- Version{Revision: "r4", Err: errors.New("parse failed")}
	in <- Version{Revision: "r5"}
	// The same revision again is "unchanged", no callback.
	in <- Version{Config: withWeight(2), Revision: "r2"}
	third := withWeight(3)
	in <- Version{Config: third, Revision: "r6"}
	c = <-calls
	assert.Same(t, second, c.old, "rejected versions never reach subscribers")
	assert.Same(t, third, c.new)
	assert.NoError(t, w.LastError())

	assert.Equal(t, 3.0, reloads(t, reg, ResultAccepted))
	assert.Equal(t, 3.0, reloads(t, reg, ResultRejected))
	assert.Equal(t, 1.0, reloads(t, reg, ResultUnchanged))
	assert.Equal(t, 3, logs.FilterMessage("config version rejected; the last good configuration keeps serving").Len())

	in <- Version{Config: bad, Revision: "r7"}
	require.Eventually(t, func() bool { return w.LastError() != nil }, 5*time.Second, time.Millisecond)
	assert.ErrorIs(t, w.LastError(), ErrInvalidConfig)
	assert.Same(t, third, w.Current())

	cancel()
	in <- Version{Config: withWeight(4), Revision: "r8"}
	require.Eventually(t, func() bool { return w.Revision() == "r8" }, 5*time.Second, time.Millisecond)
	select {
	case c := <-calls:
		t.Fatalf("callback after cancel: %+v", c)
	default:
	}
}

func TestWatcherSurvivesPanickingSubscriber(t *testing.T) {
	in := make(chan Version, 1)
	in <- Version{Config: withWeight(1), Revision: "1"}
	w, err := Start(context.Background(), Chan(in), Options{})
	require.NoError(t, err)
	defer w.Close()
	got := make(chan *Config, 1)
	w.Subscribe(func(_, _ *Config) { panic("boom") })
	w.Subscribe(func(_, n *Config) { got <- n })
	in <- Version{Config: withWeight(2), Revision: "2"}
	assert.Equal(t, 2, (<-got).Topics["t"].Clusters[0].Weight)
	in <- Version{Config: withWeight(3), Revision: "3"}
	assert.Equal(t, 3, (<-got).Topics["t"].Clusters[0].Weight)
}

func TestWatchersShareARegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	for i := 0; i < 2; i++ {
		w, err := Start(context.Background(), Static(validBase()), Options{Registerer: reg})
		require.NoError(t, err)
		defer w.Close()
	}
	assert.Equal(t, 2.0, reloads(t, reg, ResultAccepted))
	assert.Equal(t, 1, testutil.CollectAndCount(reg, "twinmq_config_last_accepted_timestamp_seconds"))
}

func TestCurrentUnderConcurrentReloads(t *testing.T) {
	in := make(chan Version)
	go func() { in <- Version{Config: withWeight(1), Revision: "0"} }()
	w, err := Start(context.Background(), Chan(in), Options{})
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := w.Current()
				// Every reader sees a whole, valid document.
				if assert.NoError(t, c.Validate()) {
					_ = c.Topics["t"].Clusters[0].Weight
				}
			}
		}()
	}
	for i := 1; i <= 200; i++ {
		in <- Version{Config: withWeight(i), Revision: strconv.Itoa(i)}
	}
	close(stop)
	wg.Wait()
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close twice is fine")
	assert.NotNil(t, w.Current(), "Current still answers after Close")
}

// A subscriber that unsubscribes (or subscribes another) from its own
// callback must not wedge the Watcher: "react to the first change, then stop
// listening" is an ordinary pattern.
func TestSubscriberMayCancelAndSubscribeFromCallback(t *testing.T) {
	in := make(chan Version, 1)
	in <- Version{Config: withWeight(1), Revision: "r1"}
	w, err := Start(context.Background(), Chan(in), Options{})
	require.NoError(t, err)
	defer w.Close()

	once := make(chan int, 10)
	later := make(chan int, 10)
	var cancel func()
	_, cancel = w.Subscribe(func(_, n *Config) {
		once <- n.Topics["t"].Clusters[0].Weight
		cancel()
		w.Subscribe(func(_, n *Config) { later <- n.Topics["t"].Clusters[0].Weight })
	})

	in <- Version{Config: withWeight(2), Revision: "r2"}
	assert.Equal(t, 2, recvInt(t, once))
	in <- Version{Config: withWeight(3), Revision: "r3"}
	assert.Equal(t, 3, recvInt(t, later), "a subscriber added in a callback gets the versions after it")
	require.Equal(t, "r3", w.Revision())
	assert.Empty(t, once, "a cancelled subscriber is not called again")
}

func recvInt(t *testing.T, ch <-chan int) int {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no value: the Watcher is stuck")
	}
	return 0
}

// A config file deleted and then put back unchanged: the version that comes
// back equals the one serving, so the error of the deletion must clear.
func TestUnchangedVersionClearsLastError(t *testing.T) {
	in := make(chan Version, 1)
	in <- Version{Config: withWeight(1), Revision: "r1"}
	reg := prometheus.NewRegistry()
	w, err := Start(context.Background(), Chan(in), Options{Registerer: reg})
	require.NoError(t, err)
	defer w.Close()

	in <- Version{Err: errors.New("config file: no such file")}
	require.Eventually(t, func() bool { return w.LastError() != nil }, 5*time.Second, time.Millisecond)
	in <- Version{Config: withWeight(1), Revision: "r1"}
	require.Eventually(t, func() bool { return reloads(t, reg, ResultUnchanged) == 1 }, 5*time.Second, time.Millisecond)
	assert.NoError(t, w.LastError(), "the serving version is back; nothing is wrong")
	assert.Equal(t, "r1", w.Revision())
}

func TestWatcherCloseRemovesItsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := Start(context.Background(), Static(validBase()), Options{Registerer: reg, Name: "producer"})
	require.NoError(t, err)
	b, err := Start(context.Background(), Static(validBase()), Options{Registerer: reg, Name: "consumer/g/t"})
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, 2, testutil.CollectAndCount(reg, "twinmq_config_last_accepted_timestamp_seconds"))
	require.NoError(t, a.Close())
	assert.Equal(t, 1, testutil.CollectAndCount(reg, "twinmq_config_last_accepted_timestamp_seconds"))
	assert.Equal(t, 1, testutil.CollectAndCount(reg, "twinmq_config_reloads_total"), "only b's accepted series")
}
