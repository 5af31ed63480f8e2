package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/internal/testenv"
)

// syncBuffer collects what run prints while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	urlRe   = regexp.MustCompile(`Playground:\s+(http://\S+)/`)
	adminRe = regexp.MustCompile(`Admin token:\s+(\S+)`)
	userRe  = regexp.MustCompile(`User token:\s+(\S+)`)
)

// startService runs the whole program in-process and waits for its demo
// banner; it returns the base URL, the admin token and a stop function.
func startService(t *testing.T, env map[string]string) (base, admin string) {
	base, admin, _ = startServiceOut(t, env)
	return base, admin
}

// startServiceOut is startService that also returns the banner.
func startServiceOut(t *testing.T, env map[string]string) (base, admin, banner string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, out, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run returned %v after shutdown", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("service did not shut down")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m, a := urlRe.FindStringSubmatch(out.String()), adminRe.FindStringSubmatch(out.String()); m != nil && a != nil {
			return m[1], a[1], out.String()
		}
		select {
		case err := <-done:
			t.Fatalf("service exited: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no banner; output so far: %s", out.String())
	return "", "", ""
}

func postQuery(t *testing.T, base, token, query string) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	req, _ := http.NewRequest(http.MethodPost, base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out["errors"] != nil {
		t.Fatalf("errors: %v", out["errors"])
	}
	return out["data"].(map[string]any)
}

func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const createAndRead = `mutation { createVoucher(input: {shopId: "5", title: "Ten off", payValue: 100, actualValue: 1000, type: SECKILL, stock: 30, beginAt: "2026-01-01T00:00:00Z", endAt: "2099-01-01T00:00:00Z"}) { id seckill { remaining } } }`

func TestEmbeddedModeNeedsNoConfiguration(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "flashsale.db")
	base, admin, banner := startServiceOut(t, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": dbPath})

	data := postQuery(t, base, admin, `{ vouchers { edges { node { id title seckill { remaining } } } } }`)
	if edges := data["vouchers"].(map[string]any)["edges"].([]any); len(edges) != 1 {
		t.Fatalf("want the demo voucher, got %v", edges)
	}
	created := postQuery(t, base, admin, createAndRead)["createVoucher"].(map[string]any)
	read := postQuery(t, base, admin, `{ voucher(id: "`+created["id"].(string)+`") { title seckill { remaining } } }`)["voucher"].(map[string]any)
	if read["title"] != "Ten off" || read["seckill"].(map[string]any)["remaining"] != float64(30) {
		t.Fatalf("read back %v", read)
	}
	for _, path := range []string{"/", "/healthz", "/readyz", "/metrics"} {
		if code, body := getStatus(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}

	// The demo user grabs the demo voucher; the order reaches SQLite.
	user := userRe.FindStringSubmatch(banner)[1]
	grab := postQuery(t, base, user, `mutation { seckillVoucher(voucherId: "1") { code orderId } }`)["seckillVoucher"].(map[string]any)
	if grab["code"] != "OK" {
		t.Fatalf("demo grab: %v", grab)
	}
	db := testenv.MustOpen(t, dbPath)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.NewSelect().Table("tb_voucher_order").ColumnExpr("count(*)").Where("id = ?", grab["orderId"]).Scan(t.Context(), &n); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the demo order never reached the embedded database")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRealModeUsesRedisAndPostgres(t *testing.T) {
	redisSrv := testenv.MustRedis(t)
	dbURL := testenv.MustPostgresURL(t)
	base, admin := startService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "REDIS_URL": redisSrv.URL(), "DATABASE_URL": dbURL,
		"JWT_SECRET": "real-mode-secret", "DEMO": "true",
	})
	created := postQuery(t, base, admin, createAndRead)["createVoucher"].(map[string]any)
	id := created["id"].(string)
	stock := postQuery(t, base, admin, `{ stock(voucherId: "`+id+`") { remaining sold } }`)["stock"].(map[string]any)
	if stock["remaining"] != float64(30) {
		t.Fatalf("stock %v", stock)
	}
	if got, _ := redisSrv.Client().Get(t.Context(), "{v"+id+"}:stock").Int(); got != 30 {
		t.Fatalf("redis stock %d", got)
	}
	db := testenv.MustOpen(t, dbURL)
	var n int
	if err := db.NewSelect().Table("tb_seckill_voucher").ColumnExpr("count(*)").Where("voucher_id = ? AND stock = 30", id).Scan(t.Context(), &n); err != nil || n != 1 {
		t.Fatalf("tb_seckill_voucher: n=%d err=%v", n, err)
	}
}

func TestInvalidConfigurationFailsWithOneLine(t *testing.T) {
	cases := []struct {
		name, want string
		env        map[string]string
	}{
		{"unreachable redis", "invalid REDIS_URL", map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0", "JWT_SECRET": "s", "SQLITE_PATH": filepath.Join(t.TempDir(), "a.db")}},
		{"unreachable postgres", "invalid DATABASE_URL", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x?sslmode=disable", "JWT_SECRET": "s"}},
		{"real mode without secret", "invalid JWT_SECRET", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := run(t.Context(), nil, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line starting %q", err, tc.want)
			}
		})
	}
}

func TestTokenCommand(t *testing.T) {
	var out bytes.Buffer
	env := map[string]string{"JWT_SECRET": "cmd-secret"}
	if err := run(t.Context(), []string{"token", "--user", "42", "--role", "admin"}, func(k string) string { return env[k] }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	id, err := auth.NewTokens("cmd-secret").Verify(strings.TrimSpace(out.String()))
	if err != nil || id.UserID != 42 || !id.IsAdmin() {
		t.Fatalf("token %q: %+v %v", out.String(), id, err)
	}
	if err := run(t.Context(), []string{"token", "--user", "42"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Fatal("token without a secret succeeded")
	}
}
