package config

import (
	"strings"
	"testing"
)

// Every setting of the table has its row, and a setting added to the
// table gets one. (The operators' reference, with the packages' defaults,
// is config/owners' test.) Not parallel: the reference works
// defaults out with GOMAXPROCS changed for a moment.
func TestReferenceHasARowPerSetting(t *testing.T) {
	rows := func() map[string]string {
		out := map[string]string{}
		for _, line := range strings.Split(Reference(func() Owners { return nil }), "\n") {
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
