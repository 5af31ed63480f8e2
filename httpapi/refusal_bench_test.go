package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"flashsale/httpapi"
	"flashsale/node"
)

// discardWriter is a ResponseWriter that keeps the status and drops the
// body, reused across requests: the benchmark measures the handler, not
// a recorder.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header    { return w.h }
func (w *discardWriter) WriteHeader(status int) { w.status = status }
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(b), nil
}

// reusedBody is a request body read again for every request.
type reusedBody struct{ bytes.Reader }

func (*reusedBody) Close() error { return nil }

// refuseAll stands for RATE_IP_PER_SEC's Redis check, always spent: the
// refusal admission makes after the body is decoded, without the round
// trip.
type refuseAll struct{}

func (refuseAll) IPEnabled() bool { return true }
func (refuseAll) AllowIP(context.Context, string) (time.Duration, error) {
	return 500 * time.Millisecond, nil
}

// BenchmarkRefusal is the node's cost of one POST { __typename } without
// a token from one address, in one run: answered; refused at the edge
// (SHED_IP_PER_SEC spent: refusalEdge, before the body is read); and, to
// compare, refused by admission (RATE_IP_PER_SEC spent, the Redis check
// stubbed), after the body is decoded, which is where every per-address
// refusal was made before. Its ns/op and allocs/op are the handler's
// alone, on a connection that collects refusals.
//
//	go test ./httpapi -run '^$' -bench BenchmarkRefusal -benchmem
func BenchmarkRefusal(b *testing.B) {
	for _, bc := range []struct {
		name   string
		env    map[string]string
		hooks  node.Hooks
		status int
	}{
		{"typename answered", map[string]string{"SHED_IP_PER_SEC": "0"}, node.Hooks{}, http.StatusOK},
		{"refused at the edge", map[string]string{"SHED_IP_PER_SEC": "1"}, node.Hooks{}, http.StatusTooManyRequests},
		{"refused by admission", map[string]string{"SHED_IP_PER_SEC": "0"},
			node.Hooks{HTTP: func(o *httpapi.HandlerOptions) { o.IPLimit = refuseAll{} }}, http.StatusOK},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := startNode(b, bc.env, bc.hooks).GraphQL
			ctx := httpapi.ConnContext(context.Background(), nil)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/query", nil)
			req.RemoteAddr = "203.0.113.5:4321"
			req.Header.Set("Content-Type", "application/json")
			body, text := &reusedBody{}, []byte(typename)
			w := &discardWriter{h: http.Header{}}
			serve := func() {
				clear(w.h)
				w.status = 0
				body.Reset(text)
				req.Body, req.ContentLength = body, int64(len(typename))
				h.ServeHTTP(w, req)
			}
			for range 3 { // the burst spent, the pools warm
				serve()
			}
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
			if w.status != bc.status {
				b.Fatalf("status %d, want %d", w.status, bc.status)
			}
		})
	}
}
