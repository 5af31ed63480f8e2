// Package deploy_test checks what deploy/ ships for operators to import:
// the Grafana dashboard, the Prometheus alert rules and the image. The
// folder holds no Go code of its own; its tests read the files beside
// them against the service's declared metrics.
package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"flashsale/internal/metrics"
	// The assembly links every package that declares a metric, so that
	// metrics.Declared lists them all.
	_ "flashsale/node"
)

// dashboardFile is the dashboard operators import into Grafana.
const dashboardFile = "grafana/flashsale.json"

// The dashboard as Grafana's model has it: only the fields checked.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Inputs        []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Datasource *datasource     `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         *int        `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	GridPos    *gridPos    `json:"gridPos"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type gridPos struct {
	H, W, X, Y int
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// gridWidth is Grafana's grid: 24 columns.
const gridWidth = 24

// panelTypes are the panel plugins Grafana ships that the dashboard may use.
var panelTypes = []string{"row", "timeseries", "stat", "gauge", "bargauge", "table", "text", "heatmap", "barchart", "state-timeline"}

// The dashboard loads as Grafana's model: a title, a uid Grafana accepts,
// a schema version, and panels that each have a unique id, a known type,
// a title, a place on the 24-column grid that no other panel overlaps,
// and (but for rows) queries whose data source is the one the import asks
// for; every query parses as PromQL and reads only series the service
// exports, with only the labels they carry.
func TestDashboardIsValidGrafanaJSON(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range checkDashboard(raw, exportedSeries(t)) {
		t.Error(problem)
	}
}

// checkDashboard returns what is wrong with the dashboard raw, whose
// queries may read the series known.
func checkDashboard(raw []byte, known map[string][]string) []string {
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return []string{fmt.Sprintf("%s: not JSON: %v", dashboardFile, err)}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if d.Title == "" {
		bad("the dashboard has no title")
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`).MatchString(d.UID) {
		bad("uid %q: want 1 to 40 letters, digits, - or _", d.UID)
	}
	if d.SchemaVersion < 36 {
		bad("schemaVersion %d: want 36 or later (Grafana 9+)", d.SchemaVersion)
	}
	sources := map[string]bool{}
	for _, in := range d.Inputs {
		if in.Type == "datasource" && in.PluginID == "prometheus" {
			sources["${"+in.Name+"}"] = true
		}
	}
	if len(sources) == 0 {
		bad("__inputs declares no Prometheus data source to choose at import")
	}
	checkSource := func(where string, ds *datasource) {
		switch {
		case ds == nil:
			bad("%s: no datasource", where)
		case ds.Type != "prometheus" || !sources[ds.UID]:
			bad("%s: datasource %+v is not a Prometheus input of __inputs", where, *ds)
		}
	}
	checkExpr := func(where, expr string) {
		for _, p := range checkPromQL(grafanaVariables(expr), known) {
			bad("%s: %s", where, p)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := fmt.Sprintf("variable %q", v.Name)
		checkSource(where, v.Datasource)
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			_ = json.Unmarshal(v.Query, &q.Query) // the older form: a plain string
		}
		if m := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`).FindStringSubmatch(q.Query); m == nil {
			bad("%s: query %q: want label_values(metric, label)", where, q.Query)
		} else {
			checkExpr(where, m[1]+`{`+m[2]+`!=""}`)
		}
	}
	ids := map[int]string{}
	var placed []panel
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %q", p.Title)
			if p.Title == "" {
				where = fmt.Sprintf("a panel of type %q", p.Type)
				bad("%s has no title", where)
			}
			switch {
			case p.ID == nil:
				bad("%s has no id", where)
			case ids[*p.ID] != "":
				bad("%s has the id %d of panel %q", where, *p.ID, ids[*p.ID])
			default:
				ids[*p.ID] = p.Title
			}
			if !slices.Contains(panelTypes, p.Type) {
				bad("%s: type %q is none of %v", where, p.Type, panelTypes)
			}
			switch g := p.GridPos; {
			case g == nil:
				bad("%s has no gridPos", where)
			case g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > gridWidth:
				bad("%s: gridPos %+v is off the %d-column grid", where, *g, gridWidth)
			default:
				for _, o := range placed {
					if overlap(*g, *o.GridPos) {
						bad("%s: gridPos %+v overlaps panel %q at %+v", where, *g, o.Title, *o.GridPos)
					}
				}
				placed = append(placed, p)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			checkSource(where, p.Datasource)
			if len(p.Targets) == 0 {
				bad("%s has no targets", where)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				twhere := fmt.Sprintf("%s, query %s", where, tg.RefID)
				if tg.RefID == "" || refs[tg.RefID] {
					bad("%s: refId empty or repeated", twhere)
				}
				refs[tg.RefID] = true
				checkSource(twhere, tg.Datasource)
				checkExpr(twhere, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	return problems
}

func overlap(a, b gridPos) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// grafanaVariables replaces the variables Grafana fills in before the
// query reaches Prometheus with values of their kind: intervals with a
// duration, the others (in label matchers) with a regular expression.
func grafanaVariables(expr string) string {
	expr = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`).ReplaceAllString(expr, "5m")
	return regexp.MustCompile(`\$\{\w+(:\w+)?\}|\$\w+`).ReplaceAllString(expr, ".*")
}

// checkPromQL parses expr and returns what is wrong with it: a syntax
// error, or a selector of a series not in known, or of a label that
// series does not carry. The parser is MetricsQL's (a superset of
// PromQL, a small module); promtool checks the alert rules' PromQL with
// Prometheus's own parser (alerts_test.go).
func checkPromQL(expr string, known map[string][]string) []string {
	e, err := metricsql.Parse(expr)
	if err != nil {
		return []string{fmt.Sprintf("%q does not parse: %v", expr, err)}
	}
	var problems []string
	metricsql.VisitAll(e, func(e metricsql.Expr) {
		me, ok := e.(*metricsql.MetricExpr)
		if !ok {
			return
		}
		for _, group := range me.LabelFilterss {
			name := ""
			for _, f := range group {
				if f.Label == "__name__" {
					name = f.Value
				}
			}
			labels, ok := known[name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%q reads %q, which the service does not export", expr, name))
				continue
			}
			for _, f := range group {
				if f.Label != "__name__" && !slices.Contains(labels, f.Label) {
					problems = append(problems, fmt.Sprintf("%q selects %s by the label %q, which it does not carry (%v)", expr, name, f.Label, labels))
				}
			}
		}
	})
	return problems
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"instance", "job"}

// exportedSeries are the series a node's /metrics has, each with its
// labels: those of every declared metric (a labelled one has none before
// its first sample, so the registry's list is the one to read), the Go
// runtime's and the process's from the default registry, and up, which
// Prometheus itself records per target.
func exportedSeries(tb testing.TB) map[string][]string {
	tb.Helper()
	known := map[string][]string{"up": targetLabels}
	for _, m := range metrics.Declared() {
		labels := append(slices.Clone(targetLabels), m.Labels...)
		for _, s := range m.Series() {
			if strings.HasSuffix(s, "_bucket") {
				known[s] = append(slices.Clone(labels), "le")
			} else {
				known[s] = labels
			}
		}
	}
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), metrics.Namespace+"_") {
			continue // declared above, with all their labels
		}
		var labels []string
		if ms := f.GetMetric(); len(ms) > 0 {
			for _, l := range ms[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		labels = append(labels, targetLabels...)
		known[f.GetName()] = labels
		switch f.GetType() {
		case dto.MetricType_SUMMARY:
			known[f.GetName()] = append(slices.Clone(labels), "quantile")
			known[f.GetName()+"_sum"], known[f.GetName()+"_count"] = labels, labels
		case dto.MetricType_HISTOGRAM:
			known[f.GetName()+"_bucket"] = append(slices.Clone(labels), "le")
			known[f.GetName()+"_sum"], known[f.GetName()+"_count"] = labels, labels
		}
	}
	if len(known) < 50 {
		tb.Fatalf("only %d series known: the registry was not read", len(known))
	}
	return known
}

// The check itself fails on what it is there to catch: each case breaks
// the shipped dashboard in one way and expects the problem named.
func TestDashboardCheckFindsBrokenDashboards(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	known := exportedSeries(t)
	for _, tc := range []struct {
		name string
		edit func(d map[string]any)
		want string
	}{
		{"a misspelled metric", func(d map[string]any) {
			target(d, 1)["expr"] = `sum by (code) (rate(flashsale_grabs_total[5m]))`
		}, `reads "flashsale_grabs_total", which the service does not export`},
		{"a label the metric lacks", func(d map[string]any) {
			target(d, 1)["expr"] = `sum(rate(flashsale_grab_total{voucher="1"}[5m]))`
		}, `by the label "voucher"`},
		{"a query that does not parse", func(d map[string]any) {
			target(d, 1)["expr"] = `sum(rate(flashsale_grab_total[5m])`
		}, "does not parse"},
		{"a panel without gridPos", func(d map[string]any) {
			delete(panelAt(d, 1), "gridPos")
		}, "has no gridPos"},
		{"overlapping panels", func(d map[string]any) {
			panelAt(d, 2)["gridPos"] = panelAt(d, 1)["gridPos"]
		}, "overlaps panel"},
		{"a repeated id", func(d map[string]any) {
			panelAt(d, 2)["id"] = panelAt(d, 1)["id"]
		}, "has the id"},
		{"a panel without targets", func(d map[string]any) {
			panelAt(d, 1)["targets"] = []any{}
		}, "has no targets"},
		{"a data source not asked for at import", func(d map[string]any) {
			target(d, 1)["datasource"] = map[string]any{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
		}, "is not a Prometheus input"},
		{"no schemaVersion", func(d map[string]any) { delete(d, "schemaVersion") }, "schemaVersion 0"},
		{"no title", func(d map[string]any) { d["title"] = "" }, "has no title"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d map[string]any
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			tc.edit(d)
			broken, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			problems := checkDashboard(broken, known)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Fatalf("problems %q, want one containing %q", problems, tc.want)
			}
		})
	}
}

// panelAt is the dashboard's i-th panel (0 is the first row).
func panelAt(d map[string]any, i int) map[string]any {
	return d["panels"].([]any)[i].(map[string]any)
}

// target is the first query of the dashboard's i-th panel.
func target(d map[string]any, i int) map[string]any {
	return panelAt(d, i)["targets"].([]any)[0].(map[string]any)
}
