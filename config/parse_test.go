package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const goodDoc = `{
  "topics": {
    "orders": {"clusters": [
      {"name": "dc1", "endpoints": ["10.0.0.1:8081", "10.0.0.2:8081"], "priority": 0, "credentials": "main"},
      {"name": "dc2", "endpoints": ["10.1.0.1:8081"], "priority": 1, "topic": "orders_dc2", "weight": 0, "tls": true}
    ]},
    "audit": {"clusters": [{"name": "dc1", "endpoints": ["localhost:8081"], "weight": 5}]}
  },
  "batching":    {"enabled": true, "maxDelay": "5ms", "batchMaxBytes": 65536, "totalBatchMaxBytes": 8388608},
  "failover":    {"failureFactor": 0.4, "recovery": 0.02, "minWeight": 0.05, "probeInterval": "2s"},
  "timeouts":    {"request": "2s", "sendDeadline": "6s"},
  "credentials": {"main": {"accessKey": "ak", "accessSecret": "sk"}},
  "consumers":   {"billing": {"concurrency": 32, "maxAttempts": 4, "lane": "a.x"}, "ledger": {}},
  "lanes":       {"enabled": false, "leaseTTL": "3s", "forwardTimeout": "1s"}
}`

func TestParseGoodDocument(t *testing.T) {
	c, err := Load([]byte(goodDoc))
	require.NoError(t, err)

	orders := c.Topics["orders"].Clusters
	require.Len(t, orders, 2)
	assert.Equal(t, Cluster{Name: "dc1", Endpoints: []string{"10.0.0.1:8081", "10.0.0.2:8081"}, Topic: "orders",
		Weight: DefaultWeight, Credentials: "main"}, orders[0], "defaults: weight, physical topic = logic topic")
	assert.Equal(t, Cluster{Name: "dc2", Endpoints: []string{"10.1.0.1:8081"}, Topic: "orders_dc2", Weight: 0,
		Priority: 1, TLS: true}, orders[1], "an explicit weight 0 drains, it is not replaced by the default")
	assert.Equal(t, 5, c.Topics["audit"].Clusters[0].Weight)

	assert.Equal(t, Batching{Enabled: true, MaxDelay: Duration(5 * time.Millisecond), BatchMaxBytes: 65536, TotalBatchMaxBytes: 8 << 20}, c.Batching)
	assert.Equal(t, Failover{FailureFactor: 0.4, Recovery: 0.02, MinWeight: 0.05, ProbeInterval: Duration(2 * time.Second),
		SlowRequest: Duration(DefaultSlowRequest)}, c.Failover)
	assert.Equal(t, 2*time.Second, c.Timeouts.Request.D())
	assert.Equal(t, Consumer{Concurrency: 32, MaxAttempts: 4, Lane: "a.x", Mode: ModeDirect}, c.Consumers["billing"])
	assert.Equal(t, Consumer{Concurrency: DefaultConcurrency, MaxAttempts: DefaultMaxAttempts, Mode: ModeDirect}, c.Consumers["ledger"])
	assert.Equal(t, Lanes{Enabled: false, LeaseTTL: Duration(3 * time.Second), ForwardTimeout: Duration(time.Second)}, c.Lanes)
}

func TestParseFillsSectionDefaults(t *testing.T) {
	c, err := Load([]byte(`{"topics": {"t": {"clusters": [{"name": "a", "endpoints": ["h:1"]}]}},
		"batching": {"maxDelay": "20ms"}}`))
	require.NoError(t, err)
	want := Default()
	want.Batching.MaxDelay = Duration(20 * time.Millisecond)
	want.Topics = map[string]Topic{"t": {Clusters: []Cluster{{Name: "a", Endpoints: []string{"h:1"}, Topic: "t", Weight: DefaultWeight}}}}
	if d := cmp.Diff(want, c); d != "" {
		t.Fatalf("(-want +got)\n%s", d)
	}
}

func TestParseRejectsMalformedDocuments(t *testing.T) {
	cases := map[string]string{
		"empty":              ``,
		"not json":           `topics: {}`,
		"truncated":          `{"topics": {"t": {"clusters": [`,
		"unknown top field":  `{"topicz": {}}`,
		"unknown nested":     `{"batching": {"maxDelai": "1ms"}}`,
		"unknown in cluster": `{"topics": {"t": {"clusters": [{"name": "a", "wieght": 3}]}}}`,
		"trailing data":      `{} {}`,
		"numeric duration":   `{"batching": {"maxDelay": 10}}`,
		"bad duration":       `{"timeouts": {"request": "3 parsecs"}}`,
		"wrong type":         `{"batching": {"batchMaxBytes": "big"}}`,
		"array doc":          `[]`,
	}
	for name, doc := range cases {
		_, err := Parse([]byte(doc))
		require.Error(t, err, name)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	_, err := Parse([]byte(`{"topics": {}, "x": "` + strings.Repeat("a", MaxDocumentBytes) + `"}`))
	assert.ErrorIs(t, err, ErrInvalidConfig, "oversized")
}

// validBase is a valid document built in Go, for rule-by-rule mutations.
func validBase() *Config {
	c := Default()
	c.Topics = map[string]Topic{"t": {Clusters: []Cluster{
		{Name: "a", Endpoints: []string{"h1:8081"}, Topic: "t", Weight: 100},
		{Name: "b", Endpoints: []string{"h2:8081"}, Topic: "t", Weight: 100, Priority: 1, Credentials: "k"},
	}}}
	c.Credentials = map[string]Credential{"k": {AccessKey: "ak", AccessSecret: "sk"}}
	c.Consumers = map[string]Consumer{"g": {Concurrency: 1, MaxAttempts: 1, Lane: "a", Mode: ModeProxy}}
	return c
}

func TestValidateEachRule(t *testing.T) {
	require.NoError(t, validBase().Validate())
	cluster := func(c *Config) *Cluster { return &c.Topics["t"].Clusters[0] }
	cases := []struct {
		path string
		mut  func(c *Config)
	}{
		{"topics", func(c *Config) { c.Topics = nil }},
		{"topics.bad name", func(c *Config) { c.Topics["bad name"] = c.Topics["t"] }},
		{"topics." + strings.Repeat("x", 128), func(c *Config) { c.Topics[strings.Repeat("x", 128)] = c.Topics["t"] }},
		{"topics.u.clusters", func(c *Config) { c.Topics["u"] = Topic{} }},
		{"topics.t.clusters[0].name", func(c *Config) { cluster(c).Name = "" }},
		{"topics.t.clusters[0].name", func(c *Config) { cluster(c).Name = "a b" }},
		{"topics.t.clusters[1].name", func(c *Config) { c.Topics["t"].Clusters[1].Name = "a" }},
		{"topics.t.clusters[0].endpoints", func(c *Config) { cluster(c).Endpoints = nil }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{"nohost"} }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{":8081"} }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{"h:0"} }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{"h:70000"} }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{"h:http"} }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{"h:+80"} }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{" 10.0.0.1:8081"} }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{"a..b:8081"} }},
		{"topics.t.clusters[0].endpoints[0]", func(c *Config) { cluster(c).Endpoints = []string{"h\x00:8081"} }},
		{"topics.t.clusters[0].endpoints[1]", func(c *Config) { cluster(c).Endpoints = []string{"h:1", "h:1"} }},
		{"topics.t.clusters[0].topic", func(c *Config) { cluster(c).Topic = "" }},
		{"topics.t.clusters[0].topic", func(c *Config) { cluster(c).Topic = "a/b" }},
		{"topics.t.clusters[0].weight", func(c *Config) { cluster(c).Weight = -1 }},
		{"topics.t.clusters[0].weight", func(c *Config) { cluster(c).Weight = MaxWeight + 1 }},
		{"topics.t.clusters", func(c *Config) { cluster(c).Weight = 0; c.Topics["t"].Clusters[1].Weight = 0 }},
		{"topics.t.clusters[0].priority", func(c *Config) { cluster(c).Priority = -1 }},
		{"topics.t.clusters[0].credentials", func(c *Config) { cluster(c).Credentials = "nope" }},
		{"batching.maxDelay", func(c *Config) { c.Batching.MaxDelay = 0 }},
		{"batching.maxDelay", func(c *Config) { c.Batching.MaxDelay = Duration(10 * time.Second) }},
		{"batching.batchMaxBytes", func(c *Config) { c.Batching.BatchMaxBytes = 0 }},
		{"batching.batchMaxBytes", func(c *Config) { c.Batching.BatchMaxBytes = MaxBatchMaxBytes + 1 }},
		{"batching.totalBatchMaxBytes", func(c *Config) { c.Batching.TotalBatchMaxBytes = int64(c.Batching.BatchMaxBytes) - 1 }},
		{"failover.failureFactor", func(c *Config) { c.Failover.FailureFactor = 1 }},
		{"failover.failureFactor", func(c *Config) { c.Failover.FailureFactor = 0 }},
		{"failover.recovery", func(c *Config) { c.Failover.Recovery = 0 }},
		{"failover.recovery", func(c *Config) { c.Failover.Recovery = 1.5 }},
		{"failover.minWeight", func(c *Config) { c.Failover.MinWeight = -0.1 }},
		{"failover.minWeight", func(c *Config) { c.Failover.MinWeight = 1 }},
		{"failover.probeInterval", func(c *Config) { c.Failover.ProbeInterval = 0 }},
		{"timeouts.request", func(c *Config) { c.Timeouts.Request = 0 }},
		{"timeouts.sendDeadline", func(c *Config) { c.Timeouts.SendDeadline = c.Timeouts.Request - 1 }},
		{"credentials.k.accessKey", func(c *Config) { c.Credentials["k"] = Credential{AccessSecret: "s"} }},
		{"credentials.k.accessSecret", func(c *Config) { c.Credentials["k"] = Credential{AccessKey: "a"} }},
		{"consumers.bad group", func(c *Config) { c.Consumers["bad group"] = c.Consumers["g"] }},
		{"consumers.g.concurrency", func(c *Config) { g := c.Consumers["g"]; g.Concurrency = 0; c.Consumers["g"] = g }},
		{"consumers.g.concurrency", func(c *Config) { g := c.Consumers["g"]; g.Concurrency = MaxConcurrency + 1; c.Consumers["g"] = g }},
		{"consumers.g.maxAttempts", func(c *Config) { g := c.Consumers["g"]; g.MaxAttempts = 0; c.Consumers["g"] = g }},
		{"consumers.g.lane", func(c *Config) { g := c.Consumers["g"]; g.Lane = "A..b"; c.Consumers["g"] = g }},
		{"consumers.g.mode", func(c *Config) { g := c.Consumers["g"]; g.Mode = "push"; c.Consumers["g"] = g }},
		{"lanes.leaseTTL", func(c *Config) { c.Lanes.LeaseTTL = 0 }},
		{"lanes.leaseTTL", func(c *Config) { c.Lanes.LeaseTTL = Duration(time.Microsecond) }},
		{"lanes.forwardTimeout", func(c *Config) { c.Lanes.ForwardTimeout = -1 }},
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

func TestValidateListsEveryProblem(t *testing.T) {
	c := validBase()
	c.Batching.MaxDelay = 0
	c.Timeouts.Request = 0
	c.Topics["t"].Clusters[0].Endpoints = []string{"x"}
	err := c.Validate()
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Len(t, ve.Problems, 3, err.Error())
	assert.Contains(t, err.Error(), "batching.maxDelay")
	assert.Contains(t, err.Error(), "timeouts.request")
	assert.Contains(t, err.Error(), "topics.t.clusters[0].endpoints[0]")

	var nilCfg *Config
	assert.ErrorIs(t, nilCfg.Validate(), ErrInvalidConfig)
}

func TestMarshalRoundTripAndClone(t *testing.T) {
	c, err := Load([]byte(goodDoc))
	require.NoError(t, err)
	data, err := c.Marshal()
	require.NoError(t, err)
	back, err := Load(data)
	require.NoError(t, err)
	if d := cmp.Diff(c, back); d != "" {
		t.Fatalf("round trip (-want +got)\n%s", d)
	}

	cl := c.Clone()
	if d := cmp.Diff(c, cl); d != "" {
		t.Fatalf("clone (-want +got)\n%s", d)
	}
	cl.Topics["orders"].Clusters[0].Endpoints[0] = "changed:1"
	cl.Credentials["main"] = Credential{}
	cl.Consumers["billing"] = Consumer{}
	assert.Equal(t, "10.0.0.1:8081", c.Topics["orders"].Clusters[0].Endpoints[0])
	assert.Equal(t, "sk", c.Credentials["main"].AccessSecret)
	assert.Equal(t, 32, c.Consumers["billing"].Concurrency)
}

func TestCredentialNeverPrintsSecret(t *testing.T) {
	cr := Credential{AccessKey: "ak", AccessSecret: "hunter2"}
	for _, s := range []string{fmt.Sprint(cr), fmt.Sprintf("%v %+v %#v %s", cr, cr, cr, cr)} {
		assert.NotContains(t, s, "hunter2")
	}
}

func TestDiff(t *testing.T) {
	old, err := Load([]byte(goodDoc))
	require.NoError(t, err)
	assert.True(t, Diff(old, old.Clone()).Empty())

	cur := old.Clone()
	cur.Topics["orders"].Clusters[1].Weight = 50
	delete(cur.Topics, "audit")
	cur.Topics["new"] = Topic{Clusters: []Cluster{{Name: "x", Endpoints: []string{"h:1"}, Topic: "new", Weight: 1}}}
	cur.Batching.MaxDelay = Duration(time.Millisecond)
	cur.Credentials["main"] = Credential{AccessKey: "ak2", AccessSecret: "sk"}
	g := cur.Consumers["billing"]
	g.Lane = "a"
	cur.Consumers["billing"] = g
	ch := Diff(old, cur)
	assert.Equal(t, Changes{
		TopicsAdded: []string{"new"}, TopicsRemoved: []string{"audit"}, TopicsChanged: []string{"orders"},
		ConsumersChanged: []string{"billing"}, Batching: true, Credentials: true,
	}, ch)
	assert.False(t, ch.Empty())

	first := Diff(nil, old)
	assert.Equal(t, []string{"audit", "orders"}, first.TopicsAdded)
}

func TestDocExampleIsValid(t *testing.T) {
	// The example in the package doc, kept in step with it.
	doc := `{
	  "topics": {
	    "orders": {"clusters": [
	      {"name": "dc1", "endpoints": ["10.0.0.1:8081"], "priority": 0, "credentials": "main"},
	      {"name": "dc2", "endpoints": ["10.1.0.1:8081"], "priority": 1, "topic": "orders_dc2"}
	    ]}
	  },
	  "batching":    {"enabled": true, "maxDelay": "10ms", "batchMaxBytes": 262144, "totalBatchMaxBytes": 33554432},
	  "failover":    {"failureFactor": 0.5, "recovery": 0.01, "minWeight": 0.05, "probeInterval": "1s"},
	  "timeouts":    {"request": "3s", "sendDeadline": "10s"},
	  "credentials": {"main": {"accessKey": "ak", "accessSecret": "sk"}},
	  "consumers":   {"billing": {"concurrency": 32, "maxAttempts": 16, "lane": "a.x"}},
	  "lanes":       {"enabled": true, "leaseTTL": "10s", "forwardTimeout": "5s"},
	  "shadow":      {"enabled": true, "topicSuffix": "_shadow", "groupSuffix": "_shadow"}
	}`
	_, err := Load([]byte(doc))
	require.NoError(t, err)
}

// A Config built in code misses the defaults Parse fills in; the problems
// must say so, or the zero values read as nonsense ("physical topic \"\"").
func TestValidateTellsCodeBuiltConfigHowToMend(t *testing.T) {
	c := Default()
	c.Topics = map[string]Topic{"orders": {Clusters: []Cluster{{Name: "dc1", Endpoints: []string{"h:8081"}}}}}
	c.Consumers = map[string]Consumer{"g": {}}
	err := c.Validate()
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	byPath := map[string]string{}
	for _, p := range ve.Problems {
		byPath[p.Path] = p.Message
	}
	assert.Contains(t, byPath["topics.orders.clusters[0].topic"], `logic topic's name "orders"`)
	assert.Contains(t, byPath["topics.orders.clusters"], "give one a positive weight")
	assert.Contains(t, byPath["consumers.g.concurrency"], "defaults a missing one to 16")
	assert.Contains(t, byPath["consumers.g.maxAttempts"], "defaults a missing one to 16")
}

// problemMap returns the problems of a *ValidationError by path.
func problemMap(t *testing.T, err error) map[string]string {
	t.Helper()
	require.ErrorIs(t, err, ErrInvalidConfig)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve, "%v", err)
	out := map[string]string{}
	for _, p := range ve.Problems {
		out[p.Path] = p.Message
	}
	return out
}

// A duration written as a number names its field, and a second one is
// reported too: encoding/json stopped at the first, with no path.
func TestParseNamesEveryBadFieldByPath(t *testing.T) {
	_, err := Parse([]byte(`{
	  "topics": {"orders": {"clusters": [{"name": "dc1", "endpoints": ["h:1"], "weight": "heavy"}]}},
	  "batching": {"maxDelay": 10, "batchMaxBytes": 1.5, "maxDelai": "1ms"},
	  "timeouts": {"request": 3000},
	  "lanes": {"leaseTTL": "3 parsecs"},
	  "consumers": "billing"
	}`))
	got := problemMap(t, err)
	assert.Equal(t, map[string]string{
		"topics.orders.clusters[0].weight": `got the string "heavy", want an integer in range`,
		"batching.maxDelay":                `got the number 10, want a duration string such as "10ms" or "2s" (a bare number's unit would be a guess)`,
		"batching.batchMaxBytes":           "got the number 1.5, want an integer in range",
		"batching.maxDelai":                "unknown field",
		"timeouts.request":                 `got the number 3000, want a duration string such as "10ms" or "2s" (a bare number's unit would be a guess)`,
		"lanes.leaseTTL":                   `duration "3 parsecs": time: unknown unit " parsecs" in duration "3 parsecs"`,
		"consumers":                        `got the string "billing", want an object`,
	}, got)
	assert.Contains(t, err.Error(), "config: 7 problem(s): topics.orders.clusters[0].weight: ")
}

// With decoding problems, Parse also reports the rules the rest of the
// document breaks, but not those about a field it could not decode (whose
// default stands in for it).
func TestParseReportsRuleProblemsBesideDecodingProblems(t *testing.T) {
	_, err := Parse([]byte(`{
	  "topics": {"orders": {"clusters": [{"name": "dc1", "endpoints": ["nohost"], "weight": "heavy"}]}},
	  "batching": {"maxDelay": "5s"},
	  "timeouts": {"request": 3}
	}`))
	got := problemMap(t, err)
	assert.Contains(t, got, "topics.orders.clusters[0].weight", "the decoding problem")
	assert.Contains(t, got, "timeouts.request", "the decoding problem")
	assert.Contains(t, got, "topics.orders.clusters[0].endpoints[0]", "a rule problem elsewhere")
	assert.Contains(t, got, "batching.maxDelay", "a rule problem elsewhere")
	assert.NotContains(t, got, "topics.orders.clusters", "every-weight-0 stems from the undecoded weight")
	assert.Len(t, got, 4, err.Error())
}

func TestParseKeepsEncodingJSONRules(t *testing.T) {
	c, err := Parse([]byte(`{"BATCHING": {"MaxDelay": "1ms"}, "batching": {"enabled": false},
	  "topics": {"t": {"clusters": [{"name": "a", "endpoints": ["h:1"]}, {"name": "b", "endpoints": ["h:2"], "weight": 0}]}}}`))
	require.NoError(t, err)
	assert.Equal(t, Duration(time.Millisecond), c.Batching.MaxDelay, "keys fold case; an object given twice is merged")
	assert.False(t, c.Batching.Enabled)
	assert.Equal(t, DefaultWeight, c.Topics["t"].Clusters[0].Weight, "a missing weight is the default")
	assert.Equal(t, 0, c.Topics["t"].Clusters[1].Weight, "an explicit 0 drains")

	for _, doc := range []string{`[]`, `"x"`, `{"batching": {"maxDelay": null}}`} {
		_, err := Parse([]byte(doc))
		problemMap(t, err)
	}
}

func TestProblemString(t *testing.T) {
	assert.Equal(t, "a.b: bad", Problem{Path: "a.b", Message: "bad"}.String())
	assert.Equal(t, "no document", Problem{Message: "no document"}.String())
}
