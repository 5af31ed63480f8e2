package actors

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"flashsale/domain"
	"flashsale/internal/tracing"
)

// Untraced (no Options.Tracer), a batch costs nothing for tracing: its
// span and context allocate nothing, and neither does handing a sale to
// the carry.
func TestAnUntracedBatchAllocatesNothingForTracing(t *testing.T) {
	r := &Router{}
	batch := []*grabMsg{{user: 1}, {user: 2}}
	allocs := testing.AllocsPerRun(1000, func() {
		ctx, span := r.batchSpan(7, batch, nil)
		if ctx == nil {
			t.Fatal("no context")
		}
		r.carry(batch[0], domain.GrabResult{Code: domain.SeckillOK, OrderID: 1})
		span.End()
	})
	if allocs != 0 {
		t.Errorf("an untraced batch allocates %v times for tracing, want 0", allocs)
	}
}

// Traced, a batch's span is the child of its first sampled grab, links
// every grab, and is linked back from each; a sold grab's span context
// is carried for the writer by its order id.
func TestABatchSpanLinksItsGrabs(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tp.Tracer("test")
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	_, g1 := never.Tracer("test").Start(context.Background(), "grab 1")
	_, g2 := tr.Start(context.Background(), "grab 2")
	_, g3 := tr.Start(context.Background(), "grab 3")
	carry := tracing.NewCarry(0)
	r := &Router{opts: Options{Tracer: tr, Carry: carry}}
	batch := []*grabMsg{{span: g1}, {span: g2}, {span: g3}}
	_, span := r.batchSpan(7, batch, nil)
	for i, g := range batch {
		r.carry(g, domain.GrabResult{Code: domain.SeckillOK, OrderID: int64(100 + i)})
	}
	span.End()
	g2.End()
	g3.End()
	var got sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "grab batch" {
			got = s
		}
	}
	if got == nil {
		t.Fatal("no grab batch span")
	}
	if got.Parent().SpanID() != g2.SpanContext().SpanID() {
		t.Errorf("the batch's parent is %s, want the first sampled grab %s", got.Parent().SpanID(), g2.SpanContext().SpanID())
	}
	if n := len(got.Links()); n != 3 {
		t.Errorf("the batch links %d grabs, want 3", n)
	}
	for _, s := range rec.Ended() {
		if s.Name() == "grab 3" && (len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != got.SpanContext().SpanID()) {
			t.Errorf("grab 3 links %v, want its batch", s.Links())
		}
	}
	// The unsampled grab's context is not worth a link from the writer.
	if _, ok := carry.Take(100); ok {
		t.Error("an unsampled grab's span context was carried")
	}
	if sc, ok := carry.Take(101); !ok || sc.SpanID() != g2.SpanContext().SpanID() {
		t.Errorf("order 101 carries %v, %v; want grab 2's span context", sc, ok)
	}
}
