package writer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"flashsale/domain"
)

// handle is one attempt of the family's handler at live, traced with
// Options.Tracer as a span that links the batch's orders (Options.Links)
// and is the parent of the store's queries. A retry's span links
// nothing: the links are taken (Carry.Take) by the first attempt.
func (a *writerActor) handle(ctx context.Context, live []domain.LogEntry) (map[int]*domain.Refusal, error) {
	w := a.w
	if w.opts.Tracer == nil {
		return w.fam.Handler.Handle(ctx, live)
	}
	var links []trace.Link
	if w.opts.Links != nil {
		links = w.opts.Links(live)
	}
	// The child of the first sampled order's grab, so that a sampled
	// grab's trace holds the insert of its order whatever the sampler's
	// ratio; a root when none is.
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	for _, l := range links {
		if l.SpanContext.IsSampled() {
			ctx = trace.ContextWithSpanContext(ctx, l.SpanContext)
			break
		}
	}
	ctx, span := w.opts.Tracer.Start(ctx, w.fam.Name+" batch", trace.WithLinks(links...),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attribute.Int("flashsale.batch.entries", len(live))))
	defer span.End()
	refused, err := w.fam.Handler.Handle(ctx, live)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	if len(refused) > 0 {
		span.SetAttributes(attribute.Int("flashsale.batch.refused", len(refused)))
	}
	return refused, err
}
