package httpapi

import (
	"context"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"github.com/ravilushqa/otelgqlgen"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// operationTracer is gqlgen's tracing extension (otelgqlgen): a span per
// operation, named by the operation, and one per resolver's field under
// it (not per plain field: a list of orders would cost a span per
// scalar). The variables are left out of the spans: they hold user ids,
// tickets and proofs of work.
func operationTracer(tp trace.TracerProvider) graphql.HandlerExtension {
	return otelgqlgen.Middleware(otelgqlgen.WithTracerProvider(tp), otelgqlgen.WithoutVariables(),
		otelgqlgen.WithCreateSpanFromFields(func(fc *graphql.FieldContext) bool { return fc.IsResolver }))
}

// untraced ends nothing: the compiled path's grab when it traces nothing.
func untraced(error) {}

// traceGrab starts the spans gqlgen's operationTracer would for a grab
// on the compiled path: the operation (named as otelgqlgen names it) and
// the seckillVoucher field under it. The function returned ends both.
func (c *compiledGrabs) traceGrab(ctx context.Context, plan *grabPlan) (context.Context, func(error)) {
	name := plan.name
	if name == "" {
		name = otelgqlgen.GetOperationName(ctx)
	}
	ctx, op := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.Bool("flashsale.compiled", true)))
	ctx, field := c.tracer.Start(ctx, "Mutation/seckillVoucher", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("resolver.path", plan.key), attribute.String("resolver.object", "Mutation"),
			attribute.String("resolver.field", "seckillVoucher")))
	return ctx, func(err error) {
		for _, s := range []trace.Span{field, op} {
			if err != nil {
				s.SetStatus(codes.Error, err.Error())
			}
			s.End()
		}
	}
}

// traceparentEdge continues the caller's trace: an operation's spans are
// children of the W3C traceparent the request carries, if any (the
// operation's span is a root otherwise).
type traceparentEdge struct{ next http.Handler }

var traceContext = propagation.TraceContext{}

func (e traceparentEdge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Traceparent") != "" {
		r = r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
	}
	e.next.ServeHTTP(w, r)
}
