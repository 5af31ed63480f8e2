package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/extra/bunotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/config"
	"flashsale/domain"
	"flashsale/internal/tracing"
	"flashsale/persistence"
)

// The node's OpenTelemetry: traces when the OTEL_* settings ask for them
// (config.Tracing.On), and protoactor's own metrics with ACTOR_METRICS.
// Off, nothing is installed: no tracer provider, no hook on a client, no
// extension in the GraphQL handler, no field set on a grab, so the hot
// path runs as it would without this file. On, every part gets the
// node's provider explicitly (the global one is left alone: two nodes in
// one test process each export their own spans).

// traces is what the node traces with, nil when off.
type traces struct {
	provider *sdktrace.TracerProvider
	// carry hands the sold grabs' span contexts from the router to the
	// order writer.
	carry *tracing.Carry
}

// openTracing builds the tracer provider of cfg.Traces, exporting in
// batches over OTLP, sampled as the settings say.
func (a *app) openTracing(ctx context.Context) error {
	t := a.cfg.Traces
	if !t.On() {
		return nil
	}
	exp, err := spanExporter(ctx, t)
	if err != nil {
		return &config.Error{Var: "OTEL_EXPORTER_OTLP_ENDPOINT", Msg: "cannot export traces: " + err.Error()}
	}
	sampler, err := samplerOf(t)
	if err != nil {
		return &config.Error{Var: "OTEL_TRACES_SAMPLER_ARG", Msg: err.Error()}
	}
	// OTEL_RESOURCE_ATTRIBUTES first: the service's name and instance are
	// the settings'.
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(t.ServiceName), semconv.ServiceInstanceID(a.cfg.NodeID)))
	if err != nil {
		a.log.Warn("trace resource incomplete", "err", err)
	}
	a.traces = &traces{
		provider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sampler), sdktrace.WithResource(res)),
		carry:    tracing.NewCarry(0),
	}
	a.log.Info("tracing", "protocol", t.Protocol, "sampler", t.Sampler, "sampler_arg", t.SamplerArg, "service", t.ServiceName)
	return nil
}

// closeTracing exports the spans still buffered, within 5 s, last of all
// (every part that makes spans has stopped).
func (a *app) closeTracing() {
	if a.traces == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.traces.provider.Shutdown(ctx); err != nil {
		a.log.Warn("spans lost at shutdown", "err", err)
	}
}

// spanExporter is the OTLP exporter of t's protocol and endpoint. What
// the settings leave out (headers, timeout, compression, certificates)
// the exporter reads from the OTEL_EXPORTER_OTLP_* variables itself.
func spanExporter(ctx context.Context, t config.Tracing) (sdktrace.SpanExporter, error) {
	if t.Protocol == "grpc" {
		var opts []otlptracegrpc.Option
		if u := firstNonEmpty(t.TracesEndpoint, t.Endpoint); u != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	switch {
	case t.TracesEndpoint != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(t.TracesEndpoint))
	case t.Endpoint != "":
		// The base URL's signal path, as the specification says.
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(t.Endpoint, "/")+"/v1/traces"))
	}
	return otlptracehttp.New(ctx, opts...)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// samplerOf is the SDK's sampler named by OTEL_TRACES_SAMPLER.
func samplerOf(t config.Tracing) (sdktrace.Sampler, error) {
	ratio, err := config.SamplerRatio(t.SamplerArg)
	if err != nil {
		return nil, err
	}
	switch t.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	}
	return nil, fmt.Errorf("unknown sampler %q", t.Sampler)
}

// tracerProvider is the provider the GraphQL handler traces with; a nil
// interface when off (never a typed nil).
func (a *app) tracerProvider() trace.TracerProvider {
	if a.traces == nil {
		return nil
	}
	return a.traces.provider
}

// traceRedis adds the redisotel hooks to a client of the node, when
// tracing: a span per command and pipeline (the grab script's EVALSHA
// among them), without the commands' arguments (user ids, tickets) or the
// caller's file and line (a stack walk per command).
func (a *app) traceRedis(c redis.UniversalClient) redis.UniversalClient {
	if a.traces == nil || c == nil {
		return c
	}
	if err := redisotel.InstrumentTracing(c, redisotel.WithTracerProvider(a.traces.provider),
		redisotel.WithDBStatement(false), redisotel.WithCallerEnabled(false)); err != nil {
		a.log.Warn("redis client not traced", "err", err)
	}
	return c
}

// traceDB adds bunotel's query hook to the database, when tracing: a span
// per query (the order writer's INSERT among them), with no metrics of
// its own.
func (a *app) traceDB() {
	if a.traces == nil || a.db == nil {
		return
	}
	a.db.AddQueryHook(bunotel.NewQueryHook(bunotel.WithTracerProvider(a.traces.provider),
		bunotel.WithMeterProvider(noopmetric.NewMeterProvider()), bunotel.WithSpanNameQueryGen(querySpanName)))
}

// querySpanName names a query's span by the statement's first word: bun
// calls every raw query a SELECT, the order writer's INSERT ... SELECT
// FROM unnest(...) among them.
func querySpanName(e *bun.QueryEvent) string {
	word, _, _ := strings.Cut(strings.TrimSpace(e.Query), " ")
	word, _, _ = strings.Cut(word, "\n")
	if len(word) > 16 {
		word = word[:16]
	}
	return strings.ToUpper(word)
}

// traceRouter has the router trace its grab batches (linking the grabs
// each carries) and hand the sold grabs' span contexts to the writer, and
// gives it protoactor's meters with ACTOR_METRICS.
func (a *app) traceRouter(o *actors.Options) error {
	if a.traces != nil {
		o.Tracer = a.traces.provider.Tracer(tracing.Name)
		o.Carry = a.traces.carry
	}
	if a.cfg.ActorMetrics {
		mp, err := actorMeters()
		if err != nil {
			return fmt.Errorf("actor metrics: %w", err)
		}
		o.Meters = mp
	}
	return nil
}

// traceWriter has the order writer trace each batch, linking the grabs
// that sold its orders.
func (a *app) traceWriter(o *writer.Options) {
	if a.traces == nil {
		return
	}
	carry := a.traces.carry
	o.Tracer = a.traces.provider.Tracer(tracing.Name)
	o.Links = func(batch []domain.LogEntry) []trace.Link {
		var links []trace.Link
		for _, e := range batch {
			id, ok := persistence.EntryOrder(e)
			if !ok {
				continue
			}
			if sc, ok := carry.Take(id); ok {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
		return links
	}
}

// actorMeters is the meter provider of protoactor's metrics: an
// OpenTelemetry Prometheus exporter registered on the registry /metrics
// serves (prometheus's default one, internal/metrics). protoactor makes
// its instruments from the global MeterProvider, so it is set as that,
// once per process, before the first actor system is made.
var actorMeters = sync.OnceValues(func() (metric.MeterProvider, error) {
	exp, err := otelprom.New()
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	otel.SetMeterProvider(mp)
	return mp, nil
})
