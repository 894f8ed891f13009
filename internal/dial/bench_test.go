package dial

import (
	"testing"
	"time"
)

// BenchmarkDialPause runs the pause scenario (two clusters of two embedded
// brokers, 20 probes a second to each, one broker paused) with a 1 s
// reconciliation period and publishes the time from the pause to the
// paused broker's first report (dial_detect_ms, milliseconds) and the
// reports on the healthy brokers (dial_false_alarms, summed over the runs;
// must be 0). Run it with -benchtime Nx for N pauses.
func BenchmarkDialPause(b *testing.B) {
	const period = time.Second
	var detect time.Duration
	alarms := 0
	for range b.N {
		out := runPause(b, period, nil)
		b.Logf("run: detect %v, false alarms %d", out.detect, out.falseAlarms)
		detect += out.detect
		alarms += out.falseAlarms
	}
	b.ReportMetric(float64(detect.Milliseconds())/float64(b.N), "fig:dial_detect_ms")
	b.ReportMetric(float64(alarms), "fig:dial_false_alarms")
	if alarms > 0 {
		b.Errorf("%d reports on healthy brokers", alarms)
	}
}
