package dial

import (
	"context"
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
)

const probeTopic = "dial-probe"

// startEnv starts two clusters of two brokers with a Mixed probe topic and
// a Watcher on a document naming it.
func startEnv(tb testing.TB) (*embedded.Env, *config.Watcher, chan config.Version) {
	tb.Helper()
	ctx := context.Background()
	env, err := embedded.Start(ctx, embedded.Options{
		Topics:               []embedded.Topic{{Name: probeTopic, Queues: 2, Type: embedded.Mixed}},
		MinLongPolling:       50 * time.Millisecond,
		MinInvisibleDuration: time.Second,
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = env.Close(context.Background()) })
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{probeTopic: env.TopicConfig(probeTopic)}
	cfg.Timeouts.Request = config.Duration(time.Second)
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: cfg, Revision: "1"}
	w, err := config.Start(ctx, config.Chan(versions), config.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = w.Close() })
	return env, w, versions
}

// reportLog keeps the reports by broker endpoint with their times.
type reportLog struct {
	mu  sync.Mutex
	all []Report
}

func (l *reportLog) add(r Report) {
	l.mu.Lock()
	l.all = append(l.all, r)
	l.mu.Unlock()
}

func (l *reportLog) snapshot() []Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Report(nil), l.all...)
}

// pauseOutcome is what the pause scenario measured.
type pauseOutcome struct {
	detect      time.Duration // pause to the paused broker's first report
	falseAlarms int           // reports on the other brokers, whole run
	period      time.Duration
	status      []Status
	victim      string // the paused broker's endpoint
}

// runPause probes the four brokers until each has probes back, pauses one,
// waits for its report (up to three periods) and one more period, and
// counts the reports of the others.
func runPause(tb testing.TB, period time.Duration, reg prometheus.Registerer) pauseOutcome {
	tb.Helper()
	env, w, _ := startEnv(tb)
	log := &reportLog{}
	d, err := New(context.Background(), w, Options{
		Rate: 20, BodySize: 256, Period: period, Delay: 200 * time.Millisecond,
		LongPolling: 200 * time.Millisecond, InvisibleDuration: 5 * time.Second,
		OnReport: log.add, Registerer: reg,
	})
	require.NoError(tb, err)
	closed := false
	defer func() {
		if !closed {
			_ = d.Close(context.Background())
		}
	}()
	var brokers []*embedded.Broker
	for _, c := range env.Clusters() {
		brokers = append(brokers, c.Brokers()...)
	}
	require.Len(tb, brokers, 4)
	// Warm up: every broker has probes of every kind back, and a clean
	// period went by.
	require.Eventually(tb, func() bool {
		st := d.Status()
		if len(st) != 4 {
			return false
		}
		for _, s := range st {
			if s.Received < 6 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every broker's probes come back")
	time.Sleep(period)

	victim := brokers[1]
	paused := time.Now()
	victim.Pause()
	defer victim.Resume()
	var detect time.Duration
	require.Eventually(tb, func() bool {
		for _, r := range log.snapshot() {
			if r.Broker.Endpoint == victim.Endpoint() && r.At.After(paused) {
				detect = r.At.Sub(paused)
				return true
			}
		}
		return false
	}, 3*period+time.Second, 10*time.Millisecond, "the paused broker is reported")
	time.Sleep(period)
	out := pauseOutcome{detect: detect, period: period, status: d.Status(), victim: victim.Endpoint()}
	victim.Resume()
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(tb, d.Close(cctx))
	closed = true
	for _, r := range log.snapshot() {
		if r.Broker.Endpoint != victim.Endpoint() {
			out.falseAlarms++
			tb.Logf("report on a healthy broker: %+v", r)
		}
	}
	return out
}

func TestPausedBrokerIsReportedOthersStayClean(t *testing.T) {
	reg := prometheus.NewRegistry()
	period := 2 * time.Second
	out := runPause(t, period, reg)
	require.LessOrEqual(t, out.detect, 2*period+period/4, "reported within two reconciliation periods (a tick's slack)")
	require.Zero(t, out.falseAlarms, "no report on a healthy broker")
	require.Len(t, out.status, 4)
	for _, s := range out.status {
		if s.Endpoint == out.victim {
			require.False(t, s.Up, "the paused broker is down while its probes fail")
			require.NotZero(t, s.Lost+s.SendErrors)
			require.NotEmpty(t, s.LastError)
			continue
		}
		require.True(t, s.Up, s.Broker.String())
		require.Zero(t, s.Lost, s.Broker.String())
		require.Zero(t, s.Duplicated, s.Broker.String())
		require.Zero(t, s.SendErrors, s.Broker.String())
		require.NotZero(t, s.Received, s.Broker.String())
	}
	// Close removed the dial's series.
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, clientGoroutines(), "Close waited for the dial's and its clients' goroutines")
}

// clientGoroutines returns the stacks of goroutines running code of this
// package or of the driver (the embedded brokers run neither).
func clientGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") {
			continue
		}
		if strings.Contains(g, "twinmq/internal/dial.") || strings.Contains(g, "twinmq/internal/driver.") {
			out = append(out, g)
		}
	}
	return out
}

func TestStatusPageAndReload(t *testing.T) {
	env, w, versions := startEnv(t)
	reg := prometheus.NewRegistry()
	d, err := New(context.Background(), w, Options{
		Rate: 20, Period: 2 * time.Second, Kinds: []Kind{Normal}, LongPolling: 200 * time.Millisecond,
		Registerer: reg,
	})
	require.NoError(t, err)
	defer func() { _ = d.Close(context.Background()) }()
	require.Eventually(t, func() bool {
		st := d.Status()
		return len(st) == 4 && st[0].Received > 0 && st[3].Received > 0
	}, 20*time.Second, 20*time.Millisecond)

	srv := httptest.NewServer(d.StatusHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	page := string(body)
	require.Contains(t, page, `http-equiv="refresh"`)
	for _, c := range env.Clusters() {
		for _, b := range c.Brokers() {
			require.Contains(t, page, b.Endpoint())
		}
	}

	// A reload that drops one cluster stops its probes and its series.
	cfg := w.Current().Clone()
	tc := cfg.Topics[probeTopic]
	gone := tc.Clusters[1].Name
	tc.Clusters = tc.Clusters[:1]
	cfg.Topics[probeTopic] = tc
	versions <- config.Version{Config: cfg, Revision: "2"}
	require.Eventually(t, func() bool { return len(d.Status()) == 2 }, 10*time.Second, 20*time.Millisecond)
	for _, s := range d.Status() {
		require.NotEqual(t, gone, s.Cluster)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				require.False(t, l.GetName() == "cluster" && l.GetValue() == gone, "series of %s left on %s", gone, mf.GetName())
			}
		}
	}
	require.True(t, strings.HasPrefix(d.Status()[0].Topic, "dial"))
}

func TestOptionsRefused(t *testing.T) {
	_, w, _ := startEnv(t)
	for _, o := range []Options{{Rate: -1}, {BodySize: -1}, {Period: -time.Second}, {Kinds: []Kind{"fifo"}}} {
		_, err := New(context.Background(), w, o)
		require.ErrorIs(t, err, ErrInvalidOptions)
	}
}
