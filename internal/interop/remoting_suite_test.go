//go:build interop

package interop

import (
	"os"
	"testing"
	"time"

	"github.com/twinmq/twinmq/internal/remoting"
	"github.com/twinmq/twinmq/internal/remoting/remotingsuite"
	"github.com/twinmq/twinmq/internal/remoting/wire"
)

// remotingBackends runs the remoting suite (the cases TestRemotingSuiteEmbedded
// runs in `make test`) against one real broker through its name server, once
// per header serialization, one after the other: the suite's cases assert
// consecutive offsets and a FIFO group's order in shared queues, which a
// second run sending to the same queues at once breaks.
func remotingBackends(t *testing.T, name, env string, b remotingsuite.Backend) {
	addr := os.Getenv(env)
	if addr == "" {
		t.Fatalf("%s is not set: run through interop/run.sh (make interop)", env)
	}
	for _, st := range []struct {
		name string
		t    wire.SerializeType
	}{{"json", wire.JSON}, {"rocketmq", wire.RocketMQ}} {
		t.Run(st.name, func(t *testing.T) {
			b := b
			b.Name = name + "-" + st.name
			b.NameServers = []string{addr}
			b.Serialize = st.t
			remotingsuite.Run(t, b)
		})
	}
}

// TestRemotingSuiteRocketMQ5 runs the suite against RocketMQ 5.4.0's broker
// over remoting, through its name server (not the proxy). The broker runs
// inside the proxy's process (Local mode); what its responses carry as
// version is checked by the suite.
func TestRemotingSuiteRocketMQ5(t *testing.T) {
	t.Parallel()
	remotingBackends(t, "rocketmq-5.4.0", "TWINMQ_INTEROP_NAMESRV", remotingsuite.Backend{
		Pull: true,
		// transactionTimeOut 6 s (default), transactionCheckInterval 1 s
		// (interop/conf/broker.conf.tmpl).
		CheckBackWithin: 20 * time.Second,
		Timer:           true,
		Version:         remoting.V5_4_0,
	})
}

// TestRemotingSuiteRocketMQ4 runs the suite against RocketMQ 4.9.7's broker
// through its name server.
func TestRemotingSuiteRocketMQ4(t *testing.T) {
	t.Parallel()
	remotingBackends(t, "rocketmq-4.9.7", "TWINMQ_INTEROP_V4_NAMESRV", remotingsuite.Backend{
		Pull: true,
		// transactionTimeOut and transactionCheckInterval 1 s
		// (interop/conf/v4/broker.conf.tmpl).
		CheckBackWithin: 20 * time.Second,
		Timer:           false,
		Version:         remoting.V4_9_7,
	})
}
