package actors

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"flashsale/domain"
)

// noSpan is the span of a batch when the router traces nothing.
var noSpan = trace.SpanFromContext(context.Background())

// batchSpan starts the span of one grab batch (Options.Tracer): it links
// every grab of the batch and its checks, and is the child of the first
// sampled one among them, so that a sampled grab's trace holds the batch
// and the script call under it while the others reach it by their link.
// The context carries the span alone, for the batch's calls. Without a
// tracer it is the background context and a span that records nothing,
// for no allocation.
func (r *Router) batchSpan(voucherID int64, batch, checks []*grabMsg) (context.Context, trace.Span) {
	if r.opts.Tracer == nil {
		return context.Background(), noSpan
	}
	links := make([]trace.Link, 0, len(batch)+len(checks))
	var parent trace.SpanContext
	for _, gs := range [][]*grabMsg{batch, checks} {
		for _, g := range gs {
			if g.span == nil {
				continue
			}
			sc := g.span.SpanContext()
			if !sc.IsValid() {
				continue
			}
			links = append(links, trace.Link{SpanContext: sc})
			if !parent.IsSampled() {
				parent = sc
			}
		}
	}
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	ctx, span := r.opts.Tracer.Start(ctx, "grab batch", trace.WithLinks(links...), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int64("flashsale.voucher_id", voucherID), attribute.Int("flashsale.batch.grabs", len(batch)),
			attribute.Int("flashsale.batch.checks", len(checks))))
	if sc := span.SpanContext(); span.IsRecording() {
		// The other way round: each grab's span links the batch that
		// carried it.
		for _, gs := range [][]*grabMsg{batch, checks} {
			for _, g := range gs {
				if g.span != nil {
					g.span.AddLink(trace.Link{SpanContext: sc})
				}
			}
		}
	}
	return ctx, span
}

// carry hands the span context of a grab that sold to Options.Carry, for
// the order writer's batch to link.
func (r *Router) carry(g *grabMsg, res domain.GrabResult) {
	if r.opts.Carry == nil || g.span == nil || res.Code != domain.SeckillOK || res.OrderID == 0 {
		return
	}
	r.opts.Carry.Put(res.OrderID, g.span.SpanContext())
}
