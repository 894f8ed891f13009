package dial

import (
	"html/template"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// statusPage is the one-table status page; it reloads itself every 5 s.
var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"ms": func(d time.Duration) string {
		return (d.Round(100 * time.Microsecond)).String()
	},
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>twinmq dial test</title>
<style>
body{font-family:sans-serif;margin:1em}
table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}
td.l,th.l{text-align:left}
tr.down{background:#fdd}
</style></head><body>
<h1>twinmq dial test</h1>
<p>{{len .}} brokers; refreshed every 5 s; metrics at <a href="/metrics">/metrics</a>.</p>
<table>
<tr><th class="l">topic</th><th class="l">cluster</th><th class="l">broker</th><th>sent</th><th>lost</th><th>duplicated</th><th>p99</th><th class="l">last error</th></tr>
{{range .}}<tr{{if not .Up}} class="down"{{end}}><td class="l">{{.Topic}}</td><td class="l">{{.Cluster}}</td><td class="l">{{.Broker.Broker}} ({{.Endpoint}})</td><td>{{.Sent}}</td><td>{{.Lost}}</td><td>{{.Duplicated}}</td><td>{{ms .P99}}</td><td class="l">{{.LastError}}</td></tr>
{{end}}</table>
</body></html>
`))

// StatusHandler serves the status page: one row per broker.
func (d *Dialer) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := statusPage.Execute(w, d.Status()); err != nil {
			d.log.Debug("status page", zap.Error(err))
		}
	})
}
