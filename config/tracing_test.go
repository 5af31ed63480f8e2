package config

import (
	"io"
	"strings"
	"testing"
)

// Traces are on when an OTLP endpoint is set or OTEL_TRACES_EXPORTER says
// otlp, never with none, and off when nothing asks for them; wrong values
// are refused at start with the variable's name.
func TestTracingSettings(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) (Config, error) {
		env["JWT_SECRET"] = strings.Repeat("s", 32)
		return Load(nil, func(k string) string { return env[k] }, io.Discard, Owners{})
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
	}{
		{"nothing set is off", map[string]string{}, false},
		{"a sampler alone is off", map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, false},
		{"an endpoint turns them on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"a traces endpoint turns them on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"otlp alone is on, to the default endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "NONE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if c.Traces.On() != tc.on {
				t.Errorf("On() = %v, want %v", c.Traces.On(), tc.on)
			}
		})
	}
	for _, tc := range []struct{ env, value string }{
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
		{"OTEL_TRACES_SAMPLER", "sometimes"},
		{"OTEL_TRACES_SAMPLER_ARG", "1.5"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"},
	} {
		t.Run(tc.env+"="+tc.value+" is refused", func(t *testing.T) {
			_, err := load(map[string]string{tc.env: tc.value})
			if err == nil || !strings.Contains(err.Error(), "invalid "+tc.env) {
				t.Errorf("err = %v, want invalid %s", err, tc.env)
			}
		})
	}
}
