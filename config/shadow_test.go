package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShadowDefaultsAndNames(t *testing.T) {
	c, err := Load([]byte(`{
	  "topics": {"orders": {"clusters": [
	    {"name": "dc1", "endpoints": ["h1:8081"]},
	    {"name": "dc2", "endpoints": ["h2:8081"], "topic": "orders_dc2", "shadowTopic": "orders_dc2_stress"}
	  ]}},
	  "shadow": {"topicSuffix": "_shadow", "groupPrefix": "st_"}
	}`))
	require.NoError(t, err)
	assert.True(t, c.Shadow.Enabled, "the switch is on unless the document turns it off")
	got, ok := c.ShadowTopic("orders", c.Topics["orders"].Clusters[0])
	assert.True(t, ok)
	assert.Equal(t, "orders_shadow", got, "the rule applies to the physical topic")
	got, _ = c.ShadowTopic("orders", c.Topics["orders"].Clusters[1])
	assert.Equal(t, "orders_dc2_stress", got, "a cluster's own shadowTopic wins over the rule")
	assert.True(t, c.HasShadow("orders"))
	g, ok := c.ShadowGroup("billing")
	assert.True(t, ok)
	assert.Equal(t, "st_billing", g)

	plain, err := Load([]byte(`{"topics": {"t": {"clusters": [{"name": "a", "endpoints": ["h:1"]}]}}}`))
	require.NoError(t, err)
	assert.False(t, plain.HasShadow("t"), "no rule and no shadowTopic: no shadow topic")
	_, ok = plain.ShadowGroup("g")
	assert.False(t, ok)

	old := c.Clone()
	c.Shadow.Enabled = false
	assert.True(t, Diff(old, c).Shadow, "the kill switch is a change")
}

func TestValidateShadowRules(t *testing.T) {
	shadowed := func(c *Config) {
		c.Shadow = Shadow{Enabled: true, TopicSuffix: "_s", GroupSuffix: "_s"}
	}
	cluster := func(c *Config, i int) *Cluster { return &c.Topics["t"].Clusters[i] }
	base := validBase()
	shadowed(base)
	require.NoError(t, base.Validate())
	cases := []struct {
		path string
		mut  func(c *Config)
	}{
		{"shadow.topicSuffix", func(c *Config) { shadowed(c); c.Shadow.TopicSuffix = "/s" }},
		{"shadow.topicPrefix", func(c *Config) { shadowed(c); c.Shadow.TopicPrefix = "a b" }},
		{"shadow.groupPrefix", func(c *Config) { shadowed(c); c.Shadow.GroupPrefix = "." }},
		{"shadow.groupSuffix", func(c *Config) { shadowed(c); c.Shadow.GroupSuffix = "*" }},
		// Shadow topics without a group rule: retries and dead letters
		// would be the production group's.
		{"shadow", func(c *Config) { cluster(c, 0).ShadowTopic = "t_s"; cluster(c, 1).ShadowTopic = "t_s" }},
		// Only one cluster of the topic has a shadow topic.
		{"topics.t.clusters[1].shadowTopic", func(c *Config) {
			c.Shadow.GroupSuffix = "_s"
			cluster(c, 0).ShadowTopic = "t_s"
		}},
		// A shadow topic that is a production topic.
		{"topics.t.clusters[0].shadowTopic", func(c *Config) { shadowed(c); cluster(c, 0).ShadowTopic = "t" }},
		{"topics.t.clusters[1].shadowTopic", func(c *Config) {
			shadowed(c)
			c.Topics["u"] = Topic{Clusters: []Cluster{{Name: "a", Endpoints: []string{"h:1"}, Topic: "u", Weight: 1}}}
			cluster(c, 1).ShadowTopic = "u"
		}},
		{"topics.t.clusters[0].shadowTopic", func(c *Config) { shadowed(c); cluster(c, 0).Topic = strings.Repeat("x", MaxTopicNameLength) }},
		// A shadow group that is too long, or is a production group.
		{"consumers." + strings.Repeat("g", MaxGroupNameLength), func(c *Config) {
			shadowed(c)
			c.Consumers[strings.Repeat("g", MaxGroupNameLength)] = c.Consumers["g"]
		}},
		{"consumers.g", func(c *Config) { shadowed(c); c.Consumers["g_s"] = c.Consumers["g"] }},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%d_%s", i, tc.path), func(t *testing.T) {
			c := validBase()
			tc.mut(c)
			err := c.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			paths := make([]string, len(ve.Problems))
			for i, p := range ve.Problems {
				paths[i] = p.Path
			}
			assert.Contains(t, paths, tc.path, err.Error())
		})
	}
}
