package config

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// Tracing is what the OpenTelemetry traces are told by the standard OTEL_*
// variables the service reads itself. The OTLP exporter reads the rest of
// its variables (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, the
// certificates) from the environment on its own, and the resource
// OTEL_RESOURCE_ATTRIBUTES.
type Tracing struct {
	// Exporter is OTEL_TRACES_EXPORTER: "otlp", "none" or empty.
	Exporter string
	// Endpoint is OTEL_EXPORTER_OTLP_ENDPOINT, the collector's base URL
	// (/v1/traces is added over HTTP); TracesEndpoint is
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, the whole URL, which wins.
	Endpoint, TracesEndpoint string
	// Protocol is OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" or "grpc".
	Protocol string
	// Sampler and SamplerArg are OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG, in the SDK's words.
	Sampler, SamplerArg string
	// ServiceName is OTEL_SERVICE_NAME.
	ServiceName string
}

// On reports whether traces are exported: an OTLP endpoint is set, or
// OTEL_TRACES_EXPORTER says otlp (to the default endpoint), and it does
// not say none. Off, the node installs no tracer at all.
func (t Tracing) On() bool {
	switch t.Exporter {
	case "none":
		return false
	case "otlp":
		return true
	}
	return t.Endpoint != "" || t.TracesEndpoint != ""
}

// Samplers are the values OTEL_TRACES_SAMPLER takes (the SDK's).
var Samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

// tracingSettings are the traces' variables, in the start-up log's order.
func tracingSettings() []setting {
	field := func(f func(t *Tracing) *string) func(*Config) *string {
		return func(c *Config) *string { return f(&c.Traces) }
	}
	return []setting{
		lowerVar("OTEL_TRACES_EXPORTER", "", "where traces go: otlp, or none (no tracer at all, whatever else is set); unset: otlp when an OTLP endpoint is set, none otherwise", field(func(t *Tracing) *string { return &t.Exporter })).
			checked(func(c Config) string {
				switch c.Traces.Exporter {
				case "", "otlp", "none":
					return ""
				}
				return "want otlp or none"
			}),
		stringVar("OTEL_EXPORTER_OTLP_ENDPOINT", "", "the OTLP collector's base URL (http://host:4318 over http/protobuf, http://host:4317 over grpc; /v1/traces is added over HTTP); setting it turns traces on", field(func(t *Tracing) *string { return &t.Endpoint })).
			checked(func(c Config) string { return endpointProblem(c.Traces.Endpoint) }).
			shown(func(c Config) slog.Value { return slog.StringValue(RedactURL(c.Traces.Endpoint)) }),
		stringVar("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", "the traces' whole OTLP URL (http://host:4318/v1/traces), over OTEL_EXPORTER_OTLP_ENDPOINT; setting it turns traces on", field(func(t *Tracing) *string { return &t.TracesEndpoint })).
			checked(func(c Config) string { return endpointProblem(c.Traces.TracesEndpoint) }).
			shown(func(c Config) slog.Value { return slog.StringValue(RedactURL(c.Traces.TracesEndpoint)) }),
		lowerVar("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "how traces reach the collector: http/protobuf or grpc", field(func(t *Tracing) *string { return &t.Protocol })).
			checked(func(c Config) string {
				switch c.Traces.Protocol {
				case "http/protobuf", "grpc":
					return ""
				}
				return "want http/protobuf or grpc"
			}),
		lowerVar("OTEL_TRACES_SAMPLER", "parentbased_always_on", "which traces are kept: "+strings.Join(Samplers, ", ")+" (parentbased_ follows an incoming traceparent's decision)", field(func(t *Tracing) *string { return &t.Sampler })).
			checked(func(c Config) string {
				for _, s := range Samplers {
					if c.Traces.Sampler == s {
						return ""
					}
				}
				return "want one of " + strings.Join(Samplers, ", ")
			}),
		stringVar("OTEL_TRACES_SAMPLER_ARG", "", "the ratio of traces the traceidratio samplers keep, 0 to 1 (0.01 = 1 %); default 1", field(func(t *Tracing) *string { return &t.SamplerArg })).
			checked(func(c Config) string {
				if _, err := SamplerRatio(c.Traces.SamplerArg); err != nil {
					return err.Error()
				}
				return ""
			}),
		stringVar("OTEL_SERVICE_NAME", "flashsale", "the service.name of the traces", field(func(t *Tracing) *string { return &t.ServiceName })),
		boolVar("ACTOR_METRICS", "false", "export protoactor's own OpenTelemetry metrics (mailboxes, message durations, actors spawned) at /metrics beside the service's; they cost every actor message a few clock readings", func(c *Config) *bool { return &c.ActorMetrics }),
	}
}

// SamplerRatio is OTEL_TRACES_SAMPLER_ARG's ratio: 1 when empty.
func SamplerRatio(arg string) (float64, error) {
	if arg == "" {
		return 1, nil
	}
	r, err := strconv.ParseFloat(arg, 64)
	if err != nil || r < 0 || r > 1 {
		return 0, fmt.Errorf("want a ratio from 0 to 1, e.g. 0.01")
	}
	return r, nil
}

func endpointProblem(u string) string {
	if u == "" || strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
		return ""
	}
	return "want an http:// or https:// URL, e.g. http://localhost:4318"
}
