package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// The alert rules and the Prometheus configuration beside them.
const (
	alertsFile      = "prometheus/alerts.yml"
	alertsTestFile  = "prometheus/alerts_test.yml"
	prometheusFile  = "prometheus/prometheus.yml"
	operationsGuide = "../docs/OPERATIONS.md"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Every alert rule reads only series the service exports (with their
// labels), waits a stated time (for:), says how bad it is (severity), says
// what happened and what to do (summary, description), and points at a
// section of the operations guide that exists; unit tests cover each.
func TestAlertRulesReadTheServiceAndSayWhatToDo(t *testing.T) {
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(operationsGuide)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertsTestFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range checkAlerts(raw, exportedSeries(t), headingAnchors(string(guide)), string(tests)) {
		t.Error(problem)
	}
}

// checkAlerts returns what is wrong with the rule file raw, whose rules
// may read the series known, point at the guide's anchors and must each
// be named in the unit tests' text.
func checkAlerts(raw []byte, known map[string][]string, anchors []string, tests string) []string {
	var f ruleFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return []string{fmt.Sprintf("%s: %v", alertsFile, err)}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue // a recording rule
			}
			n++
			where := "alert " + r.Alert
			for _, p := range checkPromQL(r.Expr, known) {
				bad("%s: %s", where, p)
			}
			if r.For == "" {
				bad("%s: no for: (say 0m to fire at once)", where)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				bad("%s: severity %q, want warning or critical", where, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					bad("%s: no %s annotation", where, a)
				}
			}
			if rb := r.Annotations["runbook"]; rb != "" {
				doc, anchor, _ := strings.Cut(rb, "#")
				if doc != "docs/OPERATIONS.md" || !slices.Contains(anchors, anchor) {
					bad("%s: runbook %q is no section of docs/OPERATIONS.md", where, rb)
				}
			}
			if !strings.Contains(tests, "alertname: "+r.Alert+"\n") {
				bad("%s: no case in %s", where, alertsTestFile)
			}
		}
	}
	if n == 0 {
		bad("%s has no alert rules", alertsFile)
	}
	return problems
}

// headingAnchors are the anchors of a Markdown document's headings, as
// GitHub makes them: lower case, spaces to hyphens, other punctuation
// dropped.
func headingAnchors(doc string) []string {
	var out []string
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		title = strings.ReplaceAll(title, "`", "")
		out = append(out, strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-"))
	}
	return out
}

// The rule check fails on what it is there to catch.
func TestAlertCheckFindsBrokenRules(t *testing.T) {
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(operationsGuide)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertsTestFile)
	if err != nil {
		t.Fatal(err)
	}
	known, anchors := exportedSeries(t), headingAnchors(string(guide))
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"a misspelled metric", "flashsale_vouchers_held)", "flashsale_voucher_held)", `reads "flashsale_voucher_held"`},
		{"a runbook without its section", "#vouchers-are-held", "#vouchers-held", "is no section"},
		{"no severity", "severity: critical", "team: sale", "severity"},
		{"no for", "for: 2m", "keep_firing_for: 2m", "no for:"},
		{"an alert without a unit test", "alert: FlashsaleBreakerOpen", "alert: FlashsaleBreakerOpened", "no case in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(raw), tc.from) {
				t.Fatalf("%s no longer holds %q: update the case", alertsFile, tc.from)
			}
			broken := strings.Replace(string(raw), tc.from, tc.to, 1)
			problems := checkAlerts([]byte(broken), known, anchors, string(tests))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Fatalf("problems %q, want one containing %q", problems, tc.want)
			}
		})
	}
}

// promtool, Prometheus's own checker, accepts the rules (their PromQL
// with Prometheus's parser, their templates), passes their unit tests
// and accepts the example configuration; and Prometheus's parser accepts
// every query of the dashboard too (each made a recording rule, Grafana's
// variables filled in, as MetricsQL's parser is a superset of PromQL's).
// Without promtool the test skips (Debian: apt-get install prometheus),
// except under FLASHSALE_E2E=1 (scripts/e2e.sh installs it), where a skip
// would hide the check.
func TestPromtoolAcceptsTheRulesAndTheirTests(t *testing.T) {
	promtool := lookTool(t, "promtool", "apt-get install --no-install-recommends prometheus")
	queries := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(queries, dashboardAsRules(t), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
		{"check", "config", "prometheus.yml"},
		{"check", "rules", queries},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dashboardAsRules is a rule file (JSON, which YAML reads) with a
// recording rule for each query of the dashboard.
func dashboardAsRules(tb testing.TB) []byte {
	tb.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		tb.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		tb.Fatal(err)
	}
	type recording struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []recording
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				id := 0
				if p.ID != nil {
					id = *p.ID
				}
				rules = append(rules, recording{fmt.Sprintf("dashboard:panel_%d_%s", id, tg.RefID), grafanaVariables(tg.Expr)})
			}
		}
	}
	walk(d.Panels)
	if len(rules) == 0 {
		tb.Fatal("the dashboard has no queries")
	}
	out, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// lookTool finds a command on PATH, or skips the test saying how to
// install it; under FLASHSALE_E2E=1 it fails instead.
func lookTool(tb testing.TB, name, install string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("FLASHSALE_E2E") == "1" {
		tb.Fatalf("%s is not installed and FLASHSALE_E2E=1 refuses to skip: %s", name, install)
	}
	tb.Skipf("%s is not installed (%s); scripts/e2e.sh installs it and runs this test", name, install)
	return ""
}
