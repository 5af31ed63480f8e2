package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"flashsale/domain"
	"flashsale/httpapi"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

// The tests of this package's external half run the edge as production
// builds it: a node (node, through nodetest) over stores of the
// test's own, its settings saying what a test changes, node.Hooks.HTTP
// only what no setting says.

// startNode starts a node over a database and a Redis of its own, with
// env over the test settings (nodetest.Env) and hooks; its router has
// room for a loaded machine (nodetest.Patient) unless hooks.Actors says
// otherwise.
func startNode(tb testing.TB, env map[string]string, hooks node.Hooks) *nodetest.Node {
	tb.Helper()
	if hooks.Actors == nil {
		hooks.Actors = nodetest.Patient
	}
	return nodetest.Start(tb, nodetest.Options{Env: env, Hooks: hooks})
}

// postRequest is a POST /query of body (JSON-encoded) from ip (v4 or
// v6), with token when not empty.
func postRequest(ip, token string, body any) *http.Request {
	b, _ := json.Marshal(body)
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(b))
	req.RemoteAddr = net.JoinHostPort(ip, "4321")
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// serve serves h over a listener of the test's own (websockets need
// one), closed when the test ends.
func serve(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv
}

// serveAsNode serves n's routes on a listener of the test's own as the
// node serves them: through httpapi.NewServer (each request's deadlines
// and the server's limits at their defaults, the per-connection state of
// /query), every request's context derived from base. Closed when the
// test ends.
func serveAsNode(tb testing.TB, base context.Context, n *nodetest.Node) *httptest.Server {
	tb.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = httpapi.NewServer(base, n.Handler, httpapi.ServerOptions{})
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

// mustVoucher stores a seckill voucher in n's database and preheats it
// into n's Redis (testenv.MustVoucher).
func mustVoucher(tb testing.TB, n *nodetest.Node, spec testenv.VoucherSpec) domain.Voucher {
	tb.Helper()
	return testenv.MustVoucher(tb, n.DB, n.Redis.Client(), spec)
}

// post runs one POST /query through h from ip (IPv4 or IPv6) and returns the HTTP status
// and the errors' codes; every RATE_LIMITED error must say when to retry.
func post(tb testing.TB, h http.Handler, ip, token, query string) (int, []string) {
	tb.Helper()
	rec := httptest.NewRecorder()
	req := postRequest(ip, token, map[string]any{"query": query})
	h.ServeHTTP(rec, req)
	var resp struct{ Errors []nodetest.Error }
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		tb.Fatalf("%v: %.200s", err, rec.Body.String())
	}
	codes := []string{}
	for _, e := range resp.Errors {
		codes = append(codes, e.Code())
		if ms, _ := e.Extensions["retryAfterMs"].(float64); e.Code() == "RATE_LIMITED" && ms <= 0 {
			tb.Fatalf("RATE_LIMITED with retryAfterMs %v", e.Extensions["retryAfterMs"])
		}
	}
	return rec.Code, codes
}
