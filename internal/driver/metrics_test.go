package driver

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Two clients on one registry: each RPC series carries its client's
// cluster, and a closed client's series are gone while the other's stay.
func TestMetricsCarryClusterAndLeaveWithClose(t *testing.T) {
	f := startFake(t, nil)
	reg := prometheus.NewRegistry()
	a := newTestClient(t, Config{Type: Producer, Topics: []string{"orders"}, Registerer: reg, Cluster: "dc1"})
	b := newTestClient(t, Config{Type: Producer, Topics: []string{"orders"}, Registerer: reg, Cluster: "dc2"})
	for _, c := range []*Client{a, b} {
		_, err := c.QueryRoute(ctxT(t), f.addr, "orders")
		require.NoError(t, err)
	}
	clusters := func() map[string]bool {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != "twinmq_driver_rpc_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "cluster" {
						out[l.GetValue()] = true
					}
				}
			}
		}
		return out
	}
	require.Equal(t, map[string]bool{"dc1": true, "dc2": true}, clusters())
	require.NoError(t, a.Close(context.Background()))
	require.Equal(t, map[string]bool{"dc2": true}, clusters())
}
