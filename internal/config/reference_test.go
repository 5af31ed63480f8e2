package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The operators' settings reference is the table, generated: a setting
// added, removed or changed without `go generate ./internal/config` fails
// here. Not parallel: the reference works defaults out with GOMAXPROCS
// changed for a moment.
func TestOperationsShowsTheGeneratedSettingsReference(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReferenceIn(doc)
	if err != nil {
		t.Fatalf("docs/OPERATIONS.md: %v", err)
	}
	want := strings.TrimSpace(Reference())
	if got == want {
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("docs/OPERATIONS.md's settings reference is not the table's (run go generate ./internal/config); first difference, line %d:\n got: %s\nwant: %s", i+1, g, w)
		}
	}
}

// Every setting of the table has its row, and a setting added to the
// table gets one.
func TestReferenceHasARowPerSetting(t *testing.T) {
	rows := func() map[string]string {
		out := map[string]string{}
		for _, line := range strings.Split(Reference(), "\n") {
			if env, ok := strings.CutPrefix(line, "| `"); ok {
				env, _, _ = strings.Cut(env, "`")
				out[env] = line
			}
		}
		return out
	}
	if got := len(rows()); got != len(settings) {
		t.Fatalf("%d rows for %d settings", got, len(settings))
	}
	defer func(s []setting) { settings = s }(settings)
	settings = append(settings[:len(settings):len(settings)],
		intVar("NEW_SETTING", "7", "a setting just added", func(c *Config) *int { return &c.GrabBatchSize }, positive))
	row, ok := rows()["NEW_SETTING"]
	if !ok || !strings.Contains(row, "`7`") || !strings.Contains(row, "a setting just added") || !strings.Contains(row, "want a whole number >= 1") {
		t.Fatalf("an added setting's row: %q", row)
	}
}
