package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"flashsale/httpapi"
	"flashsale/httpapi/console"
	"flashsale/httpapi/playground"
)

// Each path reaches its own endpoint, and only by the methods it is
// served by; in embedded mode a request to another Host reaches none.
func TestRoutesSendEachPathToItsEndpoint(t *testing.T) {
	t.Parallel()
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(name)) })
	}
	endpoints := httpapi.Endpoints{
		GraphQL:       named("graphql"),
		Playground:    named("playground"),
		Assets:        named("assets"),
		Console:       named("console"),
		ConsoleAssets: named("console assets"),
		Ready:         named("ready"),
		Metrics:       named("metrics"),
	}
	local, err := httpapi.NewLocalHosts(nil)
	if err != nil {
		t.Fatal(err)
	}
	guarded := endpoints
	guarded.Hosts = local
	for _, tc := range []struct {
		name      string
		endpoints httpapi.Endpoints
		method    string
		target    string
		status    int
		body      string
	}{
		{"a POST to /query", endpoints, http.MethodPost, "/query", http.StatusOK, "graphql"},
		{"a GET of /query", endpoints, http.MethodGet, "/query?query={__typename}", http.StatusOK, "graphql"},
		{"the playground", endpoints, http.MethodGet, "/", http.StatusOK, "playground"},
		{"a playground asset", endpoints, http.MethodGet, playground.AssetsPath + "graphiql.js", http.StatusOK, "assets"},
		{"the console", endpoints, http.MethodGet, "/console", http.StatusOK, "console"},
		{"a console asset", endpoints, http.MethodGet, console.AssetsPath + "console.js", http.StatusOK, "console assets"},
		{"a POST to /console", endpoints, http.MethodPost, "/console", http.StatusMethodNotAllowed, ""},
		{"liveness", endpoints, http.MethodGet, "/healthz", http.StatusOK, "ok\n"},
		{"readiness", endpoints, http.MethodGet, "/readyz", http.StatusOK, "ready"},
		{"the metrics", endpoints, http.MethodGet, "/metrics", http.StatusOK, "metrics"},
		{"a POST to /readyz", endpoints, http.MethodPost, "/readyz", http.StatusMethodNotAllowed, ""},
		{"an unknown path", endpoints, http.MethodGet, "/nowhere", http.StatusNotFound, ""},
		{"an endpoint left out", httpapi.Endpoints{}, http.MethodGet, "/metrics", http.StatusNotFound, ""},
		{"a local Host in embedded mode", guarded, http.MethodGet, "http://localhost:8080/readyz", http.StatusOK, "ready"},
		{"another Host in embedded mode", guarded, http.MethodGet, "http://attacker.example/readyz", http.StatusMisdirectedRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			httpapi.Routes(tc.endpoints).ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
			if rec.Code != tc.status || (tc.body != "" && rec.Body.String() != tc.body) {
				t.Fatalf("%d %q, want %d %q", rec.Code, rec.Body, tc.status, tc.body)
			}
		})
	}
}
