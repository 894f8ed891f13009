package chaos

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// envInt reads an integer from the environment, or def.
func envInt(t testing.TB, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, "%s=%q", name, v)
	return n
}

// kindsEnv reads CHAOS_KINDS, fault kinds separated by commas (default
// all).
func kindsEnv() []string {
	if v := os.Getenv("CHAOS_KINDS"); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// intervalEnv reads CHAOS_INTERVAL, the mean time between fault starts
// (a Go duration; default def). A long one (3s) keeps most faults apart.
func intervalEnv(t testing.TB, def time.Duration) time.Duration {
	v := os.Getenv("CHAOS_INTERVAL")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "CHAOS_INTERVAL=%q", v)
	return d
}

func seed(t testing.TB) int64 {
	return envInt(t, "CHAOS_SEED", time.Now().UnixNano()%1_000_000)
}

// The short campaign of make test: about 50 faults of every kind, no
// acknowledged message lost. CHAOS_SEED replays a run's choice of faults.
func TestChaosShortCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos campaign runs broker processes for about a minute")
	}
	s := seed(t)
	t.Logf("CHAOS_SEED=%d", s)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r, err := Run(ctx, Options{Faults: 50, Seed: s, Kinds: kindsEnv(), Interval: intervalEnv(t, 300*time.Millisecond), Drain: 30 * time.Second, Logf: t.Logf})
	require.NoError(t, err)
	t.Log(r)
	// Timing is reported, not asserted (a shared machine makes it swing).
	t.Logf("FIGURE chaos_max_dead_target_ms %d", r.MaxDeadTarget.Milliseconds())
	t.Logf("FIGURE chaos_p50_dead_target_ms %d", r.P50DeadTarget.Milliseconds())
	require.NoError(t, r.Check())
	require.Equal(t, 50, r.Faults)
	require.NotZero(t, r.AckedSends)
	require.NotZero(t, r.Proxies.Conns, "clients went through the proxies")
}

func TestUnknownKindIsRefused(t *testing.T) {
	_, err := Run(context.Background(), Options{Binary: "unused", Kinds: []string{"meteor"}})
	require.ErrorIs(t, err, ErrUnknownKind)
}

// BenchmarkChaos is make chaos: the long campaign (CHAOS_FAULTS, default
// 1000), reported as fig: metrics for benchfig.
func BenchmarkChaos(b *testing.B) {
	faults := int(envInt(b, "CHAOS_FAULTS", 1000))
	for range b.N {
		s := seed(b)
		b.Logf("CHAOS_SEED=%d CHAOS_FAULTS=%d", s, faults)
		r, err := Run(context.Background(), Options{Faults: faults, Seed: s, Kinds: kindsEnv(), Interval: intervalEnv(b, 0), Logf: b.Logf})
		require.NoError(b, err)
		b.Log(r)
		b.ReportMetric(float64(r.Faults), "fig:chaos_faults")
		b.ReportMetric(float64(r.ByKind[Kill9]), "fig:chaos_faults_kill9")
		b.ReportMetric(float64(r.ByKind[SigStop]), "fig:chaos_faults_sigstop")
		b.ReportMetric(float64(r.ByKind[Partition]+r.ByKind[PartitionDC]), "fig:chaos_faults_partition")
		b.ReportMetric(float64(r.ByKind[ReplyLost]), "fig:chaos_faults_reply_lost")
		b.ReportMetric(float64(r.AckedSends), "fig:chaos_acked_sends")
		b.ReportMetric(float64(r.AckedLost), "fig:chaos_acked_lost")
		b.ReportMetric(float64(r.Duplicates), "fig:chaos_duplicates")
		b.ReportMetric(r.DuplicateRate(), "fig:chaos_duplicate_rate")
		b.ReportMetric(float64(r.MaxCallerWait.Milliseconds()), "fig:chaos_max_caller_wait_ms")
		b.ReportMetric(float64(r.FailedStored), "fig:chaos_failed_stored")
		b.ReportMetric(float64(r.MaxDeadTarget.Milliseconds()), "fig:chaos_max_dead_target_ms")
		b.ReportMetric(float64(r.P50DeadTarget.Milliseconds()), "fig:chaos_p50_dead_target_ms")
		b.ReportMetric(float64(r.P99DeadTarget.Milliseconds()), "fig:chaos_p99_dead_target_ms")
		b.ReportMetric(float64(r.DeadTargetOutlasted), "fig:chaos_dead_target_outlasted")
		if err := r.Check(); err != nil {
			b.Error(err)
		}
	}
}
