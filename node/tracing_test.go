package node_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/otlptest"
)

const createVoucher = `mutation($in: CreateVoucherInput!) { createVoucher(input: $in) { id } }`

const grab = `mutation Grab($id: ID!) { seckillVoucher(voucherId: $id) { code orderId } }`

// startVoucher creates a live seckill voucher on n and returns its id.
func startVoucher(tb testing.TB, n *nodetest.Node) string {
	tb.Helper()
	now := time.Now().UTC()
	var out struct{ CreateVoucher struct{ ID string } }
	n.MustDo(tb, n.Token(tb, 1, auth.RoleAdmin), createVoucher, map[string]any{"in": map[string]any{
		"shopId": 1, "title": "Traced voucher", "payValue": 100, "actualValue": 500, "type": "SECKILL", "stock": 10,
		"beginAt": now.Add(-time.Minute).Format(time.RFC3339), "endAt": now.Add(time.Hour).Format(time.RFC3339),
	}}, &out)
	return out.CreateVoucher.ID
}

// grabOnce grabs the voucher as user and wants it sold.
func grabOnce(tb testing.TB, n *nodetest.Node, user int64, voucher string) {
	tb.Helper()
	var out struct{ SeckillVoucher struct{ Code string } }
	n.MustDo(tb, n.Token(tb, user, auth.RoleUser), grab, map[string]any{"id": voucher}, &out)
	if out.SeckillVoucher.Code != "OK" {
		tb.Fatalf("grab answered %s, want OK", out.SeckillVoucher.Code)
	}
}

// A grab's trace, exported over OTLP/HTTP to a receiver of the test's
// own, holds the GraphQL operation and its field, the actor's batch
// (its child, linking it, and linked back by it), the grab script's
// EVALSHA under the batch, and the order writer's batch, which links the
// grab and holds the INSERT of its order. On the compiled path and on
// gqlgen's alike.
func TestAGrabIsTracedFromTheOperationToTheInsertOfItsOrder(t *testing.T) {
	// The SDK reads its batch delay from the environment only: the spans
	// are exported within 50 ms instead of 5 s.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	for _, compiled := range []string{"true", "false"} {
		t.Run("compiled grabs "+compiled, func(t *testing.T) {
			rcv, url := otlptest.Start(t)
			n := nodetest.Start(t, nodetest.Options{Hooks: nodetestPatient(), Env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": url,
				"OTEL_TRACES_SAMPLER":         "always_on",
				"GRAPHQL_COMPILED_GRABS":      compiled,
			}})
			voucher := startVoucher(t, n)
			grabOnce(t, n, 42, voucher)
			var problems []string
			deadline := time.Now().Add(15 * time.Second)
			for {
				problems = checkGrabTrace(rcv.Spans())
				if len(problems) == 0 {
					return
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Fatalf("the grab's trace is incomplete:\n%s\nspans received:\n%s", strings.Join(problems, "\n"), describe(rcv.Spans()))
		})
	}
}

// Over OTLP/gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc) the grab's trace
// reaches a gRPC receiver whole as well.
func TestAGrabIsTracedOverGRPC(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	rcv, url := otlptest.StartGRPC(t)
	n := nodetest.Start(t, nodetest.Options{Hooks: nodetestPatient(), Env: map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": url,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_SAMPLER":         "always_on",
	}})
	grabOnce(t, n, 42, startVoucher(t, n))
	var problems []string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if problems = checkGrabTrace(rcv.Spans()); len(problems) == 0 {
			return
		}
	}
	t.Fatalf("the grab's trace is incomplete over gRPC:\n%s\nspans received:\n%s", strings.Join(problems, "\n"), describe(rcv.Spans()))
}

// A grab that carries a W3C traceparent continues the caller's trace: its
// operation's span is the child of the caller's span, on either path.
func TestATraceparentIsContinued(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	rcv, url := otlptest.Start(t)
	n := nodetest.Start(t, nodetest.Options{Hooks: nodetestPatient(), Env: map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": url,
		"OTEL_TRACES_SAMPLER":         "parentbased_always_off", // only the caller's sampled traces
	}})
	voucher := startVoucher(t, n)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for i, doc := range []string{grab, `mutation Grab($id: ID!) { seckillVoucher(voucherId: $id) { ...F } } fragment F on SeckillResult { code orderId }`} {
		body := fmt.Sprintf(`{"query":%q,"variables":{"id":%q}}`, doc, voucher)
		req := httptest.NewRequest("POST", "/query", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+n.Token(t, int64(50+i), auth.RoleUser))
		req.Header.Set("Traceparent", "00-"+traceID+"-"+parentID+"-01")
		if res := n.Serve(t, req); len(res.Errors) > 0 {
			t.Fatalf("grab %d: %s", i, res.Body)
		}
	}
	// The second document is gqlgen's (the compiled path takes no
	// fragment), the first the compiled path's.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ops := 0
		for _, s := range rcv.Spans() {
			if s.Name == "Grab" && otlptest.ID(s.TraceId) == traceID && otlptest.ID(s.ParentSpanId) == parentID {
				ops++
			}
		}
		if ops == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 operations continued the caller's trace; spans:\n%s", ops, describe(rcv.Spans()))
		}
	}
}

// checkGrabTrace says what the spans lack of a grab's whole trace.
func checkGrabTrace(spans []*tracepb.Span) (problems []string) {
	find := func(want func(*tracepb.Span) bool) *tracepb.Span {
		for _, s := range spans {
			if want(s) {
				return s
			}
		}
		return nil
	}
	named := func(name string) func(*tracepb.Span) bool {
		return func(s *tracepb.Span) bool { return s.Name == name }
	}
	childOf := func(parent *tracepb.Span, want func(*tracepb.Span) bool) func(*tracepb.Span) bool {
		return func(s *tracepb.Span) bool {
			return bytes.Equal(s.TraceId, parent.TraceId) && bytes.Equal(s.ParentSpanId, parent.SpanId) && want(s)
		}
	}
	links := func(s, to *tracepb.Span) bool {
		for _, l := range s.Links {
			if bytes.Equal(l.TraceId, to.TraceId) && bytes.Equal(l.SpanId, to.SpanId) {
				return true
			}
		}
		return false
	}
	op := find(named("Grab"))
	if op == nil {
		return []string{"no span of the operation Grab"}
	}
	field := find(childOf(op, named("Mutation/seckillVoucher")))
	if field == nil {
		return []string{"no span of the field Mutation/seckillVoucher under the operation"}
	}
	batch := find(childOf(field, named("grab batch")))
	switch {
	case batch == nil:
		problems = append(problems, "no grab batch under the field")
	case !links(batch, field):
		problems = append(problems, "the grab batch does not link the grab")
	case !links(field, batch):
		problems = append(problems, "the grab does not link its batch")
	case find(childOf(batch, func(s *tracepb.Span) bool {
		name := strings.ToLower(s.Name)
		return strings.Contains(name, "evalsha") || strings.Contains(name, "fcall")
	})) == nil:
		problems = append(problems, "no EVALSHA or FCALL span under the grab batch")
	}
	writer := find(func(s *tracepb.Span) bool { return s.Name == "order writer batch" && links(s, field) })
	switch {
	case writer == nil:
		problems = append(problems, "no order writer batch linking the grab")
	case find(func(s *tracepb.Span) bool { return strings.HasPrefix(s.Name, "INSERT") && under(spans, s, writer) }) == nil:
		problems = append(problems, "no INSERT under the order writer batch")
	}
	return problems
}

// under reports whether s descends from top (bun's transaction puts its
// queries under its BEGIN).
func under(spans []*tracepb.Span, s, top *tracepb.Span) bool {
	byID := map[string]*tracepb.Span{}
	for _, x := range spans {
		byID[otlptest.ID(x.SpanId)] = x
	}
	for hops := 0; s != nil && hops < 10; hops++ {
		if !bytes.Equal(s.TraceId, top.TraceId) {
			return false
		}
		if bytes.Equal(s.ParentSpanId, top.SpanId) {
			return true
		}
		s = byID[otlptest.ID(s.ParentSpanId)]
	}
	return false
}

func describe(spans []*tracepb.Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s trace %s span %s parent %s links %d\n", s.Name, otlptest.ID(s.TraceId)[:8], otlptest.ID(s.SpanId)[:8], otlptest.ID(s.ParentSpanId), len(s.Links))
	}
	return b.String()
}

func nodetestPatient() node.Hooks { return node.Hooks{Actors: nodetest.Patient} }

// With no OTEL_* setting the node installs no tracer: a grab made while a
// recording provider is the global one leaves no span in it (nothing of
// the node reaches for the global provider either), the global provider
// stays the one the test set, and an exporter that the SDK would point
// at a receiver from the process's environment (which the node's
// settings, read from the test's own table, do not see) is sent nothing.
func TestWithoutOTELSettingsNothingIsTraced(t *testing.T) {
	rcv, url := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	n := nodetest.Start(t, nodetest.Options{Hooks: nodetestPatient()})
	voucher := startVoucher(t, n)
	grabOnce(t, n, 42, voucher)
	deadline := time.Now().Add(10 * time.Second)
	for n.Orders.Persisted() < 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := n.Orders.Persisted(); got < 1 {
		t.Fatalf("the order was not stored (%d)", got)
	}
	if spans := rec.Started(); len(spans) > 0 {
		t.Errorf("%d spans started with no OTEL_* setting, the first %q", len(spans), spans[0].Name())
	}
	time.Sleep(300 * time.Millisecond) // six export delays
	if spans, exports := rcv.Count(); spans > 0 || exports > 0 {
		t.Errorf("%d spans exported in %d requests with no OTEL_* setting", spans, exports)
	}
	if otel.GetTracerProvider() != tp {
		t.Errorf("the node replaced the global tracer provider")
	}
}

// With ACTOR_METRICS, protoactor's own OpenTelemetry metrics are served
// at /metrics beside the service's, in the same Prometheus text.
func TestActorMetricsAreServedBesideOurs(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{Hooks: nodetestPatient(), Env: map[string]string{"ACTOR_METRICS": "true"}})
	grabOnce(t, n, 42, startVoucher(t, n))
	rec := httptest.NewRecorder()
	n.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"flashsale_grab_total", "protoactor_actor_message_receive_duration_seconds", "protoactor_actor_spawn_count_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		var names []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "# TYPE protoactor") || strings.HasPrefix(l, "# TYPE otel") {
				names = append(names, l)
			}
		}
		t.Logf("protoactor's: %q", names)
	}
}
