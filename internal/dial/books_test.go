package dial

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// books is a Dialer without runners: its reconciliation driven by hand.
func books(t *testing.T, reg prometheus.Registerer) *Dialer {
	t.Helper()
	o := Options{Period: time.Second, Registerer: reg}
	require.NoError(t, o.fill())
	m, err := newMetrics(reg)
	require.NoError(t, err)
	return &Dialer{opts: o, log: o.Logger, m: m, brokers: map[Broker]*brokerState{}, probes: map[string]*probe{}}
}

// The reconciliation's verdicts: on time, lost, late after lost, received
// twice, a send that hangs, a send that fails; each reported once, and a
// clean period puts the broker back up.
func TestReconcileVerdicts(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := books(t, reg)
	k := Broker{Topic: "t", Cluster: "c", Broker: "b", Endpoint: "e:1"}
	b := d.broker(k)
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	d.sending("ok", b, Normal, at(0))
	d.sent("ok", at(5), nil)
	d.sending("dup", b, Transaction, at(0))
	d.sent("dup", at(5), nil)
	d.sending("lost", b, Normal, at(0))
	d.sent("lost", at(5), nil)
	d.sending("hung", b, Normal, at(0)) // its send never answers
	d.sending("failed", b, Delayed, at(0))
	d.sent("failed", time.Time{}, errors.New("boom"))

	d.arrived("ok", at(25))
	d.arrived("dup", at(30))
	rs := d.reconcile(at(500))
	require.Len(t, rs, 1, "the failed send")
	require.Equal(t, uint64(1), rs[0].SendErrors)
	require.Zero(t, rs[0].Lost)
	require.Equal(t, "boom", rs[0].LastError)
	d.arrived("dup", at(600))
	d.arrived("stranger", at(600)) // not ours: ignored

	rs = d.reconcile(at(1100))
	require.Len(t, rs, 1)
	r := rs[0]
	require.Equal(t, k, r.Broker)
	require.Equal(t, uint64(2), r.Lost, "the lost probe and the hung send")
	require.Equal(t, uint64(1), r.Duplicated)
	require.Zero(t, r.SendErrors, "reported at 500 already")

	d.arrived("lost", at(1200)) // late, not a duplicate
	require.Empty(t, d.reconcile(at(1300)), "nothing new")
	st := d.Status()[0]
	require.False(t, st.Up, "down until a period without a report")
	require.Equal(t, uint64(5), st.Sent)
	require.Equal(t, uint64(2), st.Received)
	require.Equal(t, uint64(2), st.Lost)
	require.Equal(t, uint64(1), st.Late)
	require.Equal(t, uint64(1), st.Duplicated)
	require.Equal(t, uint64(1), st.SendErrors)
	require.Equal(t, 20*time.Millisecond, st.P50)
	require.Equal(t, 25*time.Millisecond, st.P99)

	require.Empty(t, d.reconcile(at(2200)))
	require.True(t, d.Status()[0].Up)
	require.Equal(t, 2.0, testutil.ToFloat64(d.m.reports))
	require.Equal(t, 1.0, testutil.ToFloat64(d.m.up))
	require.Equal(t, 1.0, testutil.ToFloat64(d.m.late))

	// A slow p99 reports only with MaxP99.
	d.opts.MaxP99 = 10 * time.Millisecond
	d.sending("slow", b, Normal, at(2200))
	d.sent("slow", at(2200), nil)
	d.arrived("slow", at(2300))
	rs = d.reconcile(at(2400))
	require.Len(t, rs, 1)
	require.True(t, rs[0].SlowP99)
}
