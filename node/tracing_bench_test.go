package node_test

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/otlptest"
)

// grabRequests are n grab requests of n users for voucher, on the
// compiled path (the documents clients send), ready to serve.
func grabBodies(tb testing.TB, n *nodetest.Node, users int, voucher string) (bodies []string, tokens []string) {
	tb.Helper()
	for i := range users {
		tokens = append(tokens, "Bearer "+n.Token(tb, int64(1000+i), auth.RoleUser))
		bodies = append(bodies, `{"query":"mutation Grab($id: ID!) { seckillVoucher(voucherId: $id) { code orderId } }","variables":{"id":"`+voucher+`"}}`)
	}
	return bodies, tokens
}

// BenchmarkGrabTracing measures a grab through the node's handler
// in-process (compiled path, actor, Redis; the order writer storing
// beside it) with tracing off (no OTEL_* setting), and on, exporting to
// an in-process receiver that drops the spans, unsampled, sampled 1 %
// and 100 %: allocations and time per grab. Each grab is a new user's,
// while stock lasts.
func BenchmarkGrabTracing(b *testing.B) {
	sink := &otlptest.Receiver{Discard: true}
	srv := httptest.NewServer(sink)
	b.Cleanup(srv.Close)
	b.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	for _, c := range []struct{ name, sampler, arg string }{
		{"off", "", ""}, {"unsampled", "always_off", ""}, {"1%", "traceidratio", "0.01"}, {"100%", "always_on", ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			env := map[string]string{"GRAPHQL_COMPILED_GRABS": "true"}
			if c.sampler != "" {
				env["OTEL_EXPORTER_OTLP_ENDPOINT"] = srv.URL
				env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"] = c.sampler, c.arg
			}
			n := nodetest.Start(b, nodetest.Options{Hooks: nodetestPatient(), Env: env})
			voucher := startBigVoucher(b, n)
			const users = 20000
			bodies, tokens := grabBodies(b, n, users, voucher)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/query", strings.NewReader(bodies[i%users]))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", tokens[i%users])
				rec := httptest.NewRecorder()
				n.GraphQL.ServeHTTP(rec, req)
				if i < users && !strings.Contains(rec.Body.String(), `"OK"`) {
					b.Fatalf("grab %d: %s", i, rec.Body.String())
				}
				i++
			}
		})
	}
}

// startBigVoucher is startVoucher with stock for every grab of a
// benchmark.
func startBigVoucher(tb testing.TB, n *nodetest.Node) string {
	tb.Helper()
	now := time.Now().UTC()
	var out struct{ CreateVoucher struct{ ID string } }
	n.MustDo(tb, n.Token(tb, 1, auth.RoleAdmin), createVoucher, map[string]any{"in": map[string]any{
		"shopId": 1, "title": "Benchmarked voucher", "payValue": 100, "actualValue": 500, "type": "SECKILL", "stock": 1_000_000,
		"beginAt": now.Add(-time.Minute).Format(time.RFC3339), "endAt": now.Add(time.Hour).Format(time.RFC3339),
	}}, &out)
	_ = strconv.Itoa
	return out.CreateVoucher.ID
}
