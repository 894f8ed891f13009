package fleet_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/contrib/etcd/internal/ctl"
	"github.com/twinmq/twinmq/contrib/etcd/internal/fleet"
)

func TestMain(m *testing.M) {
	if fleet.IsMember() {
		os.Exit(fleet.Member())
	}
	os.Exit(m.Run())
}

// publish publishes as an operator does, with twinmqctl put: validate,
// read the revision, write only if nobody wrote in between (-create for
// the first version).
func publish(ctx context.Context, endpoint, key string, doc []byte) (string, error) {
	args := []string{"put", "-endpoints", endpoint, "-key", key, "-"}
	var out, errOut bytes.Buffer
	code := ctl.Run(ctx, args, bytes.NewReader(doc), &out, &errOut)
	if code == 6 { // no document yet
		out.Reset()
		errOut.Reset()
		code = ctl.Run(ctx, append(args[:len(args)-1], "-create", "-"), bytes.NewReader(doc), &out, &errOut)
	}
	if code != 0 {
		return "", fmt.Errorf("twinmqctl put: exit %d: %s", code, strings.TrimSpace(errOut.String()+out.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts OS processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := fleet.Run(ctx, fleet.Options{Binary: os.Args[0], Publish: publish, Logf: t.Logf})
	require.NoError(t, err)
	t.Logf("sent %d, handled %d, lost %d, handled twice %d, misrouted %d; a.x to a in %v; config applied in %v",
		rep.Sent, rep.Handled, rep.Lost, rep.HandledTwice, rep.Misrouted, rep.LaneFailover, rep.ConfigApply)
	assert.Empty(t, rep.Problems)
	assert.Zero(t, rep.Lost)
	assert.Zero(t, rep.HandledTwice)
	assert.Zero(t, rep.Misrouted)
	assert.True(t, rep.Returned, "a.x traffic returns to the restarted process")
	assert.Positive(t, rep.LaneFailover)
	assert.Positive(t, rep.Sent)
}

// BenchmarkFleet runs the fleet b.N times at a higher rate (`make fleet`
// runs it three times) and reports the median failover and apply times
// and the totals of what must be zero.
func BenchmarkFleet(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var (
		failover, apply             []float64
		lost, twice, misrouted, sum int
	)
	for i := 0; i < b.N; i++ {
		rep, err := fleet.Run(ctx, fleet.Options{Binary: os.Args[0], Publish: publish, Rate: 100, Phase: 3 * time.Second, Logf: b.Logf})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range rep.Problems {
			b.Log(p)
		}
		b.Logf("run %d: sent %d, lost %d, handled twice %d, misrouted %d; a.x to a in %v; config applied in %v",
			i+1, rep.Sent, rep.Lost, rep.HandledTwice, rep.Misrouted, rep.LaneFailover, rep.ConfigApply)
		failover = append(failover, float64(rep.LaneFailover)/float64(time.Millisecond))
		apply = append(apply, float64(rep.ConfigApply)/float64(time.Millisecond))
		lost += rep.Lost
		twice += rep.HandledTwice
		misrouted += rep.Misrouted
		sum += rep.Sent
	}
	b.ReportMetric(median(failover), "fig:fleet_lane_failover_ms")
	b.ReportMetric(median(apply), "fig:fleet_config_apply_ms")
	b.ReportMetric(float64(lost), "fig:fleet_lost")
	b.ReportMetric(float64(twice), "fig:fleet_handled_twice")
	b.ReportMetric(float64(misrouted), "fig:fleet_misrouted")
	b.ReportMetric(float64(sum), "fig:fleet_acked_sends")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
