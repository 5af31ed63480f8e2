package node

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"flashsale/config"
	"flashsale/config/owners"
)

// TestLogsRenderDurationsAsText: the JSON and the text handler write a
// duration as "30m0s", not as nanoseconds, at the top level, inside a
// group and inside the logged configuration (as the start-up log shows
// it, unset settings at their packages' defaults).
func TestLogsRenderDurationsAsText(t *testing.T) {
	table := owners.Table()
	cfg, err := config.Load(nil, func(string) string { return "" }, &bytes.Buffer{}, table)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.Effective(table)
	for _, tc := range []struct {
		name   string
		format string
		want   []string
	}{
		{"json", "json", []string{`"delay":"30m0s"`, `"g":{"timeout":"250ms"}`, `"grab_timeout":"5s"`, `"any":"1.5s"`}},
		{"text", "text", []string{"delay=30m0s", "g.timeout=250ms", "config.grab_timeout=5s", "any=1.5s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			c := cfg
			c.LogFormat = tc.format
			log := NewLogger(c, &buf)
			log.Info("x", "delay", 30*time.Minute, slog.Group("g", "timeout", 250*time.Millisecond), "config", cfg, "any", any(1500*time.Millisecond))
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("log line lacks %s:\n%s", w, out)
				}
			}
			if strings.Contains(out, "1800000000000") {
				t.Errorf("a duration logged as nanoseconds:\n%s", out)
			}
			if tc.format == "json" && !json.Valid(bytes.TrimSpace(buf.Bytes())) {
				t.Errorf("not one JSON line: %s", out)
			}
		})
	}
}
