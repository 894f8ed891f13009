package ctl

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

func parsed(t *testing.T, doc string) *config.Config {
	t.Helper()
	c, err := config.Load([]byte(doc))
	require.NoError(t, err)
	return c
}

func TestDescribeDetailsEveryChange(t *testing.T) {
	old := parsed(t, document(t, func(c *config.Config) {
		c.Topics["legacy"] = config.Topic{Clusters: []config.Cluster{{Name: "dc1", Endpoints: []string{"10.0.0.1:8081"}, Topic: "legacy", Weight: 100}}}
		c.Consumers["audit"] = config.Consumer{Concurrency: 1, MaxAttempts: 3, Mode: config.ModeDirect}
		c.Credentials = map[string]config.Credential{"main": {AccessKey: "ak1", AccessSecret: "old-secret"}, "gone": {AccessKey: "x", AccessSecret: "y"}}
	}))
	cur := parsed(t, document(t, func(c *config.Config) {
		ks := c.Topics["orders"].Clusters
		ks[0].Weight = 10
		ks[0].Endpoints = append(ks[0].Endpoints, "10.0.0.2:8081")
		ks[0].Credentials = "main"
		ks[1].Priority = 2
		ks = append(ks, config.Cluster{Name: "dc3", Endpoints: []string{"10.2.0.1:8081"}, Topic: "orders_dc3", Weight: 50, Priority: 3, TLS: true})
		c.Topics["orders"] = config.Topic{Clusters: ks}
		c.Topics["payments"] = config.Topic{Clusters: []config.Cluster{{Name: "dc1", Endpoints: []string{"10.0.0.1:8081"}, Topic: "payments", Weight: 100}}}
		c.Consumers["billing"] = config.Consumer{Concurrency: 32, MaxAttempts: 16, Lane: "a.x", Mode: config.ModeDirect}
		c.Consumers["shipping"] = config.Consumer{Concurrency: 4, MaxAttempts: 16, Mode: config.ModeDirect}
		c.Credentials = map[string]config.Credential{"main": {AccessKey: "ak2", AccessSecret: "new-secret"}, "extra": {AccessKey: "ak3", AccessSecret: "s3"}}
		c.Batching.MaxDelay = config.Duration(5 * time.Millisecond)
		c.Failover.FailureFactor = 0.3
		c.Timeouts.SendDeadline = config.Duration(20 * time.Second)
		c.Lanes.Enabled = false
		c.Lanes.LeaseTTL = config.Duration(3 * time.Second)
	}))
	got := describe(old, cur)
	assert.Equal(t, []string{
		`topic legacy removed`,
		`topic orders: cluster dc1 endpoints ["10.0.0.1:8081"] -> ["10.0.0.1:8081" "10.0.0.2:8081"]`,
		`topic orders: cluster dc1 weight 100 -> 10`,
		`topic orders: cluster dc1 credentials "" -> "main"`,
		`topic orders: cluster dc2 priority 1 -> 2`,
		`topic orders: cluster dc3 added (endpoints ["10.2.0.1:8081"], topic "orders_dc3", weight 50, priority 3, tls true)`,
		`topic payments added`,
		`topic payments: cluster dc1 added (endpoints ["10.0.0.1:8081"], topic "payments", weight 100, priority 0)`,
		`consumer audit removed`,
		`consumer billing: concurrency 16 -> 32`,
		`consumer billing: lane "" -> "a.x"`,
		`consumer shipping added (concurrency 4, maxAttempts 16, mode "direct")`,
		`credential extra added (accessKey "ak3")`,
		`credential gone removed`,
		`credential main: accessKey "ak1" -> "ak2"`,
		`credential main: accessSecret changed`,
		`batching: maxDelay 10ms -> 5ms`,
		`failover: failureFactor 0.5 -> 0.3`,
		`timeouts: sendDeadline 10s -> 20s`,
		`lanes: enabled true -> false`,
		`lanes: leaseTTL 10s -> 3s`,
	}, got)
	for _, l := range got {
		assert.NotContains(t, l, "secret\"", "a secret is never shown")
	}
	all := strings.Join(got, "\n")
	assert.NotContains(t, all, "new-secret")
	assert.NotContains(t, all, "old-secret")

	assert.Empty(t, describe(old, old))
}

func TestDescribeReorderedClusters(t *testing.T) {
	old := parsed(t, document(t, nil))
	cur := parsed(t, document(t, func(c *config.Config) {
		ks := c.Topics["orders"].Clusters
		ks[0], ks[1] = ks[1], ks[0]
	}))
	assert.Equal(t, []string{"topic orders: clusters reordered dc1,dc2 -> dc2,dc1"}, describe(old, cur))
}

// Every kind of change config.Diff sees shows as a line naming the field,
// so that diff's exit code and its output agree.
func TestDescribeCoversConfigDiff(t *testing.T) {
	base := parsed(t, document(t, nil))
	for _, tc := range []struct {
		edit func(*config.Config)
		want string
	}{
		{func(c *config.Config) { c.Topics["orders"].Clusters[1].TLS = true }, "topic orders: cluster dc2 tls false -> true"},
		{func(c *config.Config) { c.Topics["orders"].Clusters[1].Topic = "orders_b" }, `topic orders: cluster dc2 topic "orders" -> "orders_b"`},
		{func(c *config.Config) {
			c.Consumers["billing"] = config.Consumer{Concurrency: 16, MaxAttempts: 16, Mode: config.ModeProxy}
		}, `consumer billing: mode "direct" -> "proxy"`},
		{func(c *config.Config) { c.Batching.Enabled = false }, "batching: enabled true -> false"},
		{func(c *config.Config) { c.Batching.BatchMaxBytes = 1 << 20 }, "batching: batchMaxBytes 262144 -> 1048576"},
		{func(c *config.Config) { c.Failover.MinWeight = 0.1 }, "failover: minWeight 0 -> 0.1"},
		{func(c *config.Config) { c.Failover.SlowRequest = config.Duration(time.Second) }, "failover: slowRequest 500ms -> 1s"},
		{func(c *config.Config) { c.Timeouts.Request = config.Duration(time.Second) }, "timeouts: request 3s -> 1s"},
		{func(c *config.Config) { c.Lanes.ForwardTimeout = config.Duration(time.Second) }, "lanes: forwardTimeout 5s -> 1s"},
		{func(c *config.Config) {
			c.Credentials = map[string]config.Credential{"k": {AccessKey: "a", AccessSecret: "b"}}
		}, `credential k added (accessKey "a")`},
		{func(c *config.Config) { c.Consumers = nil }, "consumer billing removed"},
	} {
		cur := parsed(t, document(t, tc.edit))
		require.False(t, config.Diff(base, cur).Empty(), tc.want)
		assert.Equal(t, []string{tc.want}, describe(base, cur))
	}
}
