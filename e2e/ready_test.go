package e2e

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"flashsale/testkit/testenv"
)

// proxiedPostgresURL is dbURL reached through p.
func proxiedPostgresURL(tb testing.TB, dbURL string, p *testenv.Proxy) string {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}

// degradedGauge is the value /metrics shows for flashsale_degraded of the
// postgres store, or "" when it has none.
func degradedGauge(t *testing.T, base string) string {
	t.Helper()
	_, body := getStatus(t, base+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, `flashsale_degraded{store="postgres"} `); ok {
			return v
		}
	}
	return ""
}

// TestReadyzFollowsWhatTheNodeCanSell: /readyz is 200 while Redis answers
// (grabs need nothing else), also while Postgres is down, then saying
// "degraded" and setting the gauge; 503 within a short bound when Redis
// is down or stalled, or its maxmemory-policy evicts keys. Not parallel: the gauge is the process's, and the
// other services of this package's tests probe /readyz too.
func TestReadyzFollowsWhatTheNodeCanSell(t *testing.T) {
	redisSrv := testenv.MustRedis(t)
	redisProxy := testenv.MustProxy(t, redisSrv.Addr())
	pgProxy := testenv.MustProxy(t, mustPostgresHost(t))
	base, _ := startService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "REDIS_URL": "redis://" + redisProxy.Addr() + "/0",
		"DATABASE_URL": proxiedPostgresURL(t, testenv.MustPostgresURL(t), pgProxy),
		"JWT_SECRET":   "ready-secret-0123456789abcdef01234", "DEMO": "true", "LOG_LEVEL": "error",
	})
	// probe is one /readyz, which must answer within bound.
	probe := func(t *testing.T, bound time.Duration) (int, string) {
		t.Helper()
		client := &http.Client{Timeout: 10 * time.Second}
		began := time.Now()
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if took := time.Since(began); took > bound {
			t.Errorf("/readyz took %v, want at most %v", took, bound)
		}
		return resp.StatusCode, string(b)
	}
	const bound = 1500 * time.Millisecond

	t.Run("both stores up: 200 ready", func(t *testing.T) {
		if code, body := probe(t, bound); code != http.StatusOK || body != "ready\n" {
			t.Fatalf("%d %q", code, body)
		}
	})
	t.Run("postgres down: 200 degraded, and the gauge says so", func(t *testing.T) {
		pgProxy.Down()
		defer pgProxy.Up()
		if code, body := probe(t, bound); code != http.StatusOK || !strings.Contains(body, "degraded") {
			t.Fatalf("%d %q, want 200 and degraded", code, body)
		}
		if g := degradedGauge(t, base); g != "1" {
			t.Fatalf(`flashsale_degraded{store="postgres"} = %q, want 1`, g)
		}
		pgProxy.Up()
		// The pool may still hold a connection the outage cut.
		testenv.WaitFor(t, "/readyz without degraded", func() bool { _, body := probe(t, bound); return body == "ready\n" })
		if g := degradedGauge(t, base); g != "0" {
			t.Fatalf(`postgres back: flashsale_degraded{store="postgres"} = %q, want 0`, g)
		}
	})
	t.Run("redis down: 503 fast", func(t *testing.T) {
		redisProxy.Down()
		defer redisProxy.Up()
		if code, body := probe(t, bound); code != http.StatusServiceUnavailable {
			t.Fatalf("%d %q, want 503", code, body)
		}
	})
	t.Run("redis stalled: 503 fast", func(t *testing.T) {
		redisProxy.Stall()
		defer redisProxy.Resume()
		if code, body := probe(t, bound); code != http.StatusServiceUnavailable {
			t.Fatalf("%d %q, want 503", code, body)
		}
	})
	t.Run("redis evicts keys: 503 naming the policy", func(t *testing.T) {
		rdb := redisSrv.Client()
		if err := rdb.ConfigSet(t.Context(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		defer rdb.ConfigSet(context.Background(), "maxmemory-policy", "noeviction")
		if code, body := probe(t, bound); code != http.StatusServiceUnavailable || !strings.Contains(body, "allkeys-lru") {
			t.Fatalf("%d %q, want 503 naming the policy", code, body)
		}
	})
	t.Run("redis back: 200", func(t *testing.T) {
		testenv.WaitFor(t, "/readyz 200 again", func() bool { code, _ := probe(t, bound); return code == http.StatusOK })
	})
}

// TestReadyzIs503WhileDraining: once the shutdown starts the node answers
// 503 on /readyz for HTTP_DRAIN_DELAY, and still serves what it is sent
// meanwhile.
func TestReadyzIs503WhileDraining(t *testing.T) {
	t.Parallel()
	base, admin, _, stop := startStoppableService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": t.TempDir() + "/flashsale.db", "HTTP_DRAIN_DELAY": "2s",
	})
	if code, body := getStatus(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("before the shutdown: %d %q", code, body)
	}
	go stop() // it returns once the shutdown is over; the test looks meanwhile
	testenv.WaitFor(t, "/readyz 503 while draining", func() bool { code, _ := getStatus(t, base+"/readyz"); return code == http.StatusServiceUnavailable })
	if data := postQuery(t, base, admin, `{ vouchers { edges { node { id } } } }`); data["vouchers"] == nil {
		t.Fatalf("a query while draining: %v", data)
	}
}

// mustPostgresHost is the host:port of the test Postgres server.
func mustPostgresHost(tb testing.TB) string {
	tb.Helper()
	u, err := url.Parse(testenv.AdminURL())
	if err != nil || u.Host == "" {
		tb.Skipf("no test Postgres (TEST_DATABASE_URL): %v", err)
	}
	return u.Host
}
