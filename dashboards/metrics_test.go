// Package dashboards holds the Grafana dashboard and the Prometheus alerting
// rules of twinmq, and the test that keeps them, and the README's metrics
// reference, true to the code: every metric they name must be one the code
// registers, with the labels they use.
package dashboards

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/consumer"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/dial"
	"github.com/twinmq/twinmq/producer"
)

// family is what the code registers under one metric name.
type family struct {
	name, kind, help string
	constLabels      []string
	labels           []string // variable labels
}

func (f family) allLabels() []string { return append(slices.Clone(f.constLabels), f.labels...) }

// recorder is a Registerer that notes every collector registered through
// it, then registers it on the real registry.
type recorder struct {
	prometheus.Registerer
	mu   sync.Mutex
	seen map[string]family
}

func newRecorder(reg prometheus.Registerer) *recorder {
	return &recorder{Registerer: reg, seen: map[string]family{}}
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)",(?: unit: "[^"]*",)? constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)

func (r *recorder) Register(c prometheus.Collector) error {
	r.note(c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.note(c)
	}
	r.Registerer.MustRegister(cs...)
}

func (r *recorder) note(c prometheus.Collector) {
	kind := kindOf(c)
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		f := family{name: m[1], kind: kind, help: strings.ReplaceAll(m[2], `\"`, `"`)}
		for _, p := range splitList(m[3]) {
			f.constLabels = append(f.constLabels, strings.SplitN(p, "=", 2)[0])
		}
		for _, l := range splitList(m[4]) {
			f.labels = append(f.labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
		}
		r.seen[f.name] = f
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// kindOf tells the metric type of a collector: by its Go type for the
// vectors, else from one metric it collects.
func kindOf(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	kind := "untyped"
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			continue
		}
		switch {
		case pb.Counter != nil:
			kind = "counter"
		case pb.Gauge != nil:
			kind = "gauge"
		case pb.Histogram != nil:
			kind = "histogram"
		case pb.Summary != nil:
			kind = "summary"
		}
	}
	return kind
}

// catalog builds every twinmq component against the embedded brokers on
// recording registries, runs a little traffic through them, closes them
// and returns what they registered. It also checks that the closed
// producer, consumer and dial left no series behind.
func catalog(t *testing.T) map[string]family {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokerReg := newRecorder(prometheus.NewRegistry())
	env, err := embedded.Start(ctx, embedded.Options{
		Topics:         []embedded.Topic{{Name: "orders", Queues: 2, Type: embedded.Mixed}},
		MinLongPolling: 50 * time.Millisecond,
		Registerer:     brokerReg,
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"orders": env.TopicConfig("orders")}

	inner := prometheus.NewRegistry()
	rec := newRecorder(inner)
	p, err := producer.New(ctx, producer.WithConfig(cfg), producer.WithRegisterer(rec))
	require.NoError(t, err)
	got := make(chan struct{}, 16)
	c, err := consumer.New(ctx, "billing", "orders", func(context.Context, *consumer.Message) error {
		got <- struct{}{}
		return nil
	}, consumer.WithConfig(cfg), consumer.WithRegisterer(rec))
	require.NoError(t, err)
	w, err := config.Start(ctx, config.Static(cfg), config.Options{Registerer: rec, Name: "dial"})
	require.NoError(t, err)
	d, err := dial.New(ctx, w, dial.Options{Rate: 20, Period: 2 * time.Second, LongPolling: 100 * time.Millisecond, Registerer: rec})
	require.NoError(t, err)
	for range 4 {
		_, err := p.Send(ctx, &producer.Message{Topic: "orders", Body: []byte("x")})
		require.NoError(t, err)
	}
	for range 4 {
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("messages not consumed")
		}
	}
	require.NoError(t, d.Close(ctx))
	require.NoError(t, w.Close())
	require.NoError(t, c.Close(ctx))
	require.NoError(t, p.Close(ctx))

	// Closed components remove their series.
	mfs, err := inner.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		require.Empty(t, mf.GetMetric(), "%s has series after every component closed", mf.GetName())
	}

	out := map[string]family{}
	for _, r := range []*recorder{rec, brokerReg} {
		r.mu.Lock()
		for k, v := range r.seen {
			out[k] = v
		}
		r.mu.Unlock()
	}
	return out
}

var (
	metricRE   = regexp.MustCompile(`\btwinmq_[a-z0-9_]+`)
	selectorRE = regexp.MustCompile(`(twinmq_[a-z0-9_]+)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	byRE       = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// resolve maps a name used in a query to its family: histograms are
// queried through their _bucket, _sum and _count series.
func resolve(cat map[string]family, name string) (family, bool) {
	if f, ok := cat[name]; ok {
		return f, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f, ok := cat[base]; ok && (f.kind == "histogram" || f.kind == "summary") {
				return f, true
			}
		}
	}
	return family{}, false
}

// checkExpr checks that every metric expr names is registered, that its
// selectors match on labels it has, and that every grouping label belongs
// to one of the expression's metrics.
func checkExpr(t *testing.T, cat map[string]family, where, expr string) {
	t.Helper()
	names := metricRE.FindAllString(expr, -1)
	require.NotEmpty(t, names, "%s: %q queries no twinmq metric", where, expr)
	have := map[string]bool{"le": true, "instance": true, "job": true}
	for _, n := range names {
		f, ok := resolve(cat, n)
		require.True(t, ok, "%s: %s is not a metric the code registers (%q)", where, n, expr)
		for _, l := range f.allLabels() {
			have[l] = true
		}
	}
	for _, m := range selectorRE.FindAllStringSubmatch(expr, -1) {
		f, _ := resolve(cat, m[1])
		labels := append(f.allLabels(), "le", "instance", "job")
		for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			require.Contains(t, labels, lm[1], "%s: %s has no label %q (%q)", where, m[1], lm[1], expr)
		}
	}
	for _, m := range byRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range splitList(m[1]) {
			require.True(t, have[l], "%s: grouping label %q is on none of the metrics of %q", where, l, expr)
		}
	}
}

// exprs walks a decoded JSON document for "expr" strings.
func exprs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "expr" {
				*out = append(*out, s)
				continue
			}
			exprs(e, out)
		}
	case []any:
		for _, e := range x {
			exprs(e, out)
		}
	}
}

func TestDashboardRulesAndReadmeMatchTheCode(t *testing.T) {
	cat := catalog(t)
	for _, name := range []string{"twinmq_producer_sends_total", "twinmq_consumer_handled_total",
		"twinmq_failover_weight", "twinmq_driver_rpc_total", "twinmq_config_reloads_total", "twinmq_dial_lost_total"} {
		require.Contains(t, cat, name, "the catalog misses a component")
	}
	require.Subset(t, cat["twinmq_failover_weight"].labels, []string{"cluster", "endpoint"})
	require.Subset(t, cat["twinmq_driver_rpc_total"].labels, []string{"cluster"})

	t.Run("dashboard", func(t *testing.T) {
		raw, err := os.ReadFile("twinmq.json")
		require.NoError(t, err)
		var dash map[string]any
		require.NoError(t, json.Unmarshal(raw, &dash))
		require.NotEmpty(t, dash["title"])
		var rows []string
		for _, p := range dash["panels"].([]any) {
			pm := p.(map[string]any)
			if pm["type"] == "row" {
				rows = append(rows, pm["title"].(string))
			}
		}
		require.Equal(t, []string{"Producer", "Failover", "Consumer", "Configuration", "Dial test"}, rows)
		var es []string
		exprs(dash, &es)
		require.NotEmpty(t, es)
		for _, e := range es {
			checkExpr(t, cat, "dashboard", e)
		}
	})

	t.Run("alert rules", func(t *testing.T) {
		raw, err := os.ReadFile("dial-alerts.yml")
		require.NoError(t, err)
		var doc struct {
			Groups []struct {
				Name  string
				Rules []struct {
					Alert string
					Expr  string
					For   string
				}
			}
		}
		require.NoError(t, yaml.Unmarshal(raw, &doc))
		n := 0
		for _, g := range doc.Groups {
			for _, r := range g.Rules {
				require.NotEmpty(t, r.Alert)
				if r.For != "" {
					_, err := time.ParseDuration(r.For)
					require.NoError(t, err, r.Alert)
				}
				checkExpr(t, cat, r.Alert, r.Expr)
				require.Contains(t, r.Expr, "twinmq_dial_", r.Alert)
				n++
			}
		}
		require.GreaterOrEqual(t, n, 3, "loss, p99 and a broker down at least")
	})

	t.Run("README", func(t *testing.T) {
		want := readmeTable(cat)
		raw, err := os.ReadFile("../README.md")
		require.NoError(t, err)
		readme := string(raw)
		const begin, end = "<!-- metrics table: generated by dashboards/metrics_test.go -->\n", "<!-- end of metrics table -->\n"
		i, j := strings.Index(readme, begin), strings.Index(readme, end)
		require.True(t, i >= 0 && j > i, "README.md has no metrics table between the markers")
		got := readme[i+len(begin) : j]
		if got != want && os.Getenv("TWINMQ_UPDATE_README") == "1" {
			readme = readme[:i+len(begin)] + want + readme[j:]
			require.NoError(t, os.WriteFile("../README.md", []byte(readme), 0o644))
			got = want
		}
		require.Equal(t, want, got, "README metrics table out of date: run TWINMQ_UPDATE_README=1 go test ./dashboards/")
	})
}

// readmeTable is the README's metrics reference: every twinmq metric the
// code registers, with its type, labels and help text.
func readmeTable(cat map[string]family) string {
	names := make([]string, 0, len(cat))
	for n := range cat {
		if strings.HasPrefix(n, "twinmq_") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("| Name | Type | Labels | Meaning |\n|---|---|---|---|\n")
	for _, n := range names {
		f := cat[n]
		labels := strings.Join(f.allLabels(), ", ")
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", n, f.kind, labels, strings.ReplaceAll(f.help, "|", `\|`))
	}
	return b.String()
}
