package httpapi

import (
	"bytes"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	coderws "github.com/coder/websocket"

	"flashsale/graph"
	"flashsale/usecase/seckill"
)

// corsHandler is the /query handler of the twin tests with the given
// CORS origins and flood limit.
func corsHandler(tb testing.TB, origins []string, flood int) (http.Handler, string) {
	tb.Helper()
	tokens, user := twinUser(tb)
	r := &graph.Resolver{Seckill: seckill.New(scriptedGate{}, scriptedGrabber{}), Gate: scriptedGate{}}
	opts := twinOptions(tokens, flood)
	opts.CORSOrigins, opts.CompiledGrabs = origins, true
	return NewHandler(r, opts), "Bearer " + user
}

func preflight(origin, method, headers string) statusRequest {
	return statusRequest{method: http.MethodOptions, origin: origin,
		headers: map[string]string{"Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}}
}

// CORS: a preflight from an allowed origin (a pattern's port wildcard
// included) is answered 204 with the origin, the method and headers
// asked, Vary and a max-age; from any other origin it is answered
// without CORS headers, and never reaches the GraphQL handler. Actual
// answers, refusals included, carry Access-Control-Allow-Origin for an
// allowed origin only, with Vary: Origin and Retry-After readable.
func TestCORSAllowsTheConfiguredOriginsOnly(t *testing.T) {
	h, bearer := corsHandler(t, []string{"http://localhost:*", "https://shop.example.com"}, 0)
	const allowed = "http://localhost:5173"
	grab := body(`mutation { seckillVoucher(voucherId: "1") { code } }`, nil)

	t.Run("preflight from an allowed origin", func(t *testing.T) {
		for _, origin := range []string{allowed, "https://shop.example.com"} {
			got := serve(t, h, preflight(origin, "POST", "authorization,content-type"))
			hd := got.headers
			if got.status != http.StatusNoContent || hd.Get("Access-Control-Allow-Origin") != origin {
				t.Fatalf("%s: %d, Allow-Origin %q; want 204 with the origin", origin, got.status, hd.Get("Access-Control-Allow-Origin"))
			}
			if m := hd.Get("Access-Control-Allow-Methods"); !strings.Contains(m, "POST") {
				t.Errorf("Allow-Methods %q lacks POST", m)
			}
			if a := strings.ToLower(hd.Get("Access-Control-Allow-Headers")); !strings.Contains(a, "authorization") || !strings.Contains(a, "content-type") {
				t.Errorf("Allow-Headers %q lacks authorization or content-type", a)
			}
			if !strings.Contains(hd.Get("Vary"), "Origin") || hd.Get("Access-Control-Max-Age") != "7200" {
				t.Errorf("Vary %q, Max-Age %q", hd.Get("Vary"), hd.Get("Access-Control-Max-Age"))
			}
			if hd.Get("Access-Control-Allow-Credentials") != "" {
				t.Error("credentials allowed")
			}
		}
		got := serve(t, h, preflight(allowed, "GET", "apollo-require-preflight,x-apollo-operation-name"))
		if got.headers.Get("Access-Control-Allow-Origin") != allowed {
			t.Errorf("a preflight for Apollo's headers refused: %v", got.headers)
		}
	})
	t.Run("preflight from another origin", func(t *testing.T) {
		for _, origin := range []string{"http://evil.example", "http://localhost.evil.example", "https://localhost:5173", "null"} {
			got := serve(t, h, preflight(origin, "POST", "authorization,content-type"))
			if got.headers.Get("Access-Control-Allow-Origin") != "" || got.headers.Get("Access-Control-Allow-Headers") != "" {
				t.Errorf("%s: allowed: %v", origin, got.headers)
			}
			if got.headers.Get("Allow") != "" || got.body != "" {
				t.Errorf("%s: the refused preflight reached the GraphQL handler: %v %q", origin, got.headers, got.body)
			}
		}
	})
	t.Run("actual requests", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			req  statusRequest
		}{
			{"a grab", statusRequest{body: grab, authorization: bearer}},
			{"an unauthenticated query (401)", statusRequest{body: body(`{ serverTime }`, nil)}},
			{"a refused Accept (406)", statusRequest{body: grab, authorization: bearer, accept: "text/html"}},
			{"a GET query", statusRequest{method: http.MethodGet, query: "query=%7B__typename%7D", authorization: bearer}},
		} {
			for _, origin := range []string{allowed, "http://evil.example"} {
				tc.req.origin = origin
				got := serve(t, h, tc.req)
				want := ""
				if origin == allowed {
					want = allowed
				}
				if acao := got.headers.Get("Access-Control-Allow-Origin"); acao != want {
					t.Errorf("%s from %s: Allow-Origin %q, want %q", tc.name, origin, acao, want)
				}
				if !strings.Contains(got.headers.Get("Vary"), "Origin") {
					t.Errorf("%s from %s: no Vary: Origin", tc.name, origin)
				}
				if origin == allowed && !strings.Contains(got.headers.Get("Access-Control-Expose-Headers"), "Retry-After") {
					t.Errorf("%s: Retry-After not exposed: %v", tc.name, got.headers)
				}
			}
		}
	})
	t.Run("any origin with *, no credentials", func(t *testing.T) {
		star, _ := corsHandler(t, []string{"*"}, 0)
		got := serve(t, star, preflight("http://anywhere.example", "POST", "authorization,content-type"))
		if got.headers.Get("Access-Control-Allow-Origin") != "*" || got.headers.Get("Access-Control-Allow-Credentials") != "" {
			t.Fatalf("%v", got.headers)
		}
	})
	t.Run("no origins configured", func(t *testing.T) {
		none, _ := corsHandler(t, nil, 0)
		got := serve(t, none, preflight(allowed, "POST", "authorization,content-type"))
		if got.headers.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("allowed with no origins configured: %v", got.headers)
		}
		got = serve(t, none, statusRequest{body: grab, authorization: bearer, origin: allowed})
		if got.headers.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("allowed with no origins configured: %v", got.headers)
		}
	})
}

// A flood of preflights from one address pays the in-process flood
// limit like any request: past it, 429 with Retry-After and nothing
// else.
func TestCORSPreflightFloodIsShed(t *testing.T) {
	h, _ := corsHandler(t, []string{"http://localhost:*"}, 1) // a burst of 2
	var got statusAnswer
	for range 3 {
		got = serve(t, h, preflight("http://localhost:5173", "POST", "authorization,content-type"))
	}
	if got.status != http.StatusTooManyRequests || got.headers.Get("Retry-After") != "1" || got.headers.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("the third preflight of a burst of 2: %d %v", got.status, got.headers)
	}
}

// The CORS origins decide a websocket's Origin: allowed even when it
// differs from Host (a dev server's proxy), as are no Origin and the
// request's own host; any other is refused 403 with FORBIDDEN, written
// once (net/http logs no superfluous WriteHeader).
func TestWebsocketOriginFollowsCORS(t *testing.T) {
	h, _ := corsHandler(t, []string{"http://localhost:*"}, 0)
	srv := httptest.NewUnstartedServer(h)
	// Read once the server is closed: Close waits for the handlers that
	// would log (a refused handshake is not hijacked).
	var logged bytes.Buffer
	srv.Config.ErrorLog = log.New(&logged, "", 0)
	srv.Start()
	defer srv.Close()
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http")
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{srv.URL, true},
		{"http://localhost:5173", true},
		{"http://evil.example", false},
		{"http://localhost.evil.example", false},
	} {
		header := http.Header{}
		if tc.origin != "" {
			header.Set("Origin", tc.origin)
		}
		c, resp, err := coderws.Dial(t.Context(), wsURL, &coderws.DialOptions{HTTPHeader: header, Subprotocols: []string{"graphql-transport-ws"}})
		if tc.ok {
			if err != nil {
				t.Errorf("origin %q: %v, want accepted", tc.origin, err)
				continue
			}
			_ = c.CloseNow()
			continue
		}
		if err == nil {
			_ = c.CloseNow()
			t.Errorf("origin %q accepted, want 403", tc.origin)
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("origin %q: %v, want 403", tc.origin, err)
		}
	}
	srv.Close()
	if s := logged.String(); strings.Contains(s, "superfluous") {
		t.Errorf("the server logged %q", s)
	}
}
