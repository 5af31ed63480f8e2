package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"flashsale/config"
	"flashsale/config/owners"
	"flashsale/node"
	"flashsale/testkit/testenv"
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

// serve is what the server does after its subcommands (see run in
// server.go), in-process: the configuration from env alone, the logs
// discarded, the demo banner on out, the node served until ctx ends.
func serve(ctx context.Context, env map[string]string, out, logs io.Writer) error {
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard, owners.Table())
	if err != nil {
		return err
	}
	return node.Serve(ctx, cfg, node.NewLogger(cfg, logs), out)
}

// startService runs the whole program in-process and waits for its demo
// banner; it returns the base URL, the admin token and a stop function.
func startService(t *testing.T, env map[string]string) (base, admin string) {
	base, admin, _ = startServiceOut(t, env)
	return base, admin
}

// startServiceOut is startService that also returns the banner.
func startServiceOut(t *testing.T, env map[string]string) (base, admin, banner string) {
	t.Helper()
	base, admin, banner, _ = startStoppableService(t, env)
	return base, admin, banner
}

// startStoppableService is startServiceOut that also returns what a
// SIGTERM would do: start the shutdown (the test's end waits for it).
func startStoppableService(t *testing.T, env map[string]string) (base, admin, banner string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, logs := &syncBuffer{}, &syncBuffer{}
	var runErr error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		runErr = serve(ctx, env, out, logs)
	}()
	// stop returns once run has: the shutdown drained the order log, so a
	// next start on the same files sees everything the first one sold.
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-finished:
				if runErr != nil {
					t.Errorf("run returned %v after shutdown", runErr)
				}
			case <-time.After(15 * time.Second):
				t.Error("service did not shut down")
			}
		})
	}
	t.Cleanup(stop)
	t.Cleanup(func() { // registered last, so it runs first: before the shutdown's lines
		if t.Failed() {
			t.Logf("the node's log, last lines:\n%s", lastLines(logs.String(), 60))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m, a := urlRe.FindStringSubmatch(out.String()), adminRe.FindStringSubmatch(out.String()); m != nil && a != nil {
			return m[1], a[1], out.String(), stop
		}
		select {
		case <-finished:
			t.Fatalf("service exited: %v", runErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no banner; output so far: %s", out.String())
	return "", "", "", nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// postGraphQL posts one GraphQL request (its JSON payload) to base with a
// bearer token and decodes the answer into out.
func postGraphQL(t *testing.T, base, token string, payload map[string]any, out any) {
	t.Helper()
	body, _ := json.Marshal(payload)
	req, _ := http.NewRequest(http.MethodPost, base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func postQuery(t *testing.T, base, token, query string) map[string]any {
	t.Helper()
	var out map[string]any
	postGraphQL(t, base, token, map[string]any{"query": query}, &out)
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
	t.Parallel()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "flashsale.db")
	base, admin, banner := startServiceOut(t, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": dbPath})

	data := postQuery(t, base, admin, `{ vouchers { edges { node { id title seckill { remaining } } } } }`)
	if edges := data["vouchers"].(map[string]any)["edges"].([]any); len(edges) != 3 {
		t.Fatalf("want the three demo vouchers, got %v", edges)
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
	t.Parallel()
	redisSrv := testenv.MustRedis(t)
	dbURL := testenv.MustPostgresURL(t)
	base, admin := startService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "REDIS_URL": redisSrv.URL(), "DATABASE_URL": dbURL,
		"JWT_SECRET": "real-mode-secret-0123456789abcdef", "DEMO": "true",
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
	// Real mode never puts a token in the playground, even with DEMO on
	// and a loopback address: whoever loads the page would get it.
	if code, page := getStatus(t, base+"/"); code != http.StatusOK || !strings.Contains(page, "mutation Grab") ||
		strings.Contains(page, "data-headers") || strings.Contains(page, "Bearer") {
		t.Fatalf("real-mode playground page (%d) lacks the sample operation or carries headers:\n%s", code, page)
	}
}

// closedPort returns a port on 127.0.0.1 that nothing listens on.
func closedPort(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	return port
}

// runBinary runs the built service with only env and args and returns its
// stderr and exit code.
func runBinary(tb testing.TB, bin string, env map[string]string, args ...string) (stderr string, code int) {
	tb.Helper()
	_, stderr, code = runBinaryOut(tb, bin, env, args...)
	return stderr, code
}

// runBinaryOut is runBinary that also returns the process's stdout.
func runBinaryOut(tb testing.TB, bin string, env map[string]string, args ...string) (stdout, stderr string, code int) {
	tb.Helper()
	// A hung process fails its test in a minute rather than the package's.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = tb.TempDir() // the embedded SQLite file, if any, lands here
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var outb, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		tb.Fatal(err)
	}
	return outb.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// The contract: a wrong value stops the process non-zero with one line
// naming the variable. It is checked on the real process, because what
// breaks it is printed outside run's error: go-redis's own logger writes
// to the process's stderr, and pgx lists each failed host on a line.
// realSecret is a JWT_SECRET real mode accepts (at least 32 bytes).
const realSecret = "server-test-secret-0123456789abcdef"

func TestInvalidConfigurationFailsWithOneLine(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	secrets := map[string]string{"JWT_SECRET": "topsecret-value-0123456789abcdef0", "DATABASE_URL": "postgres://postgres:pgsecret@127.0.0.1:" + closedPort(t) + "/x"}
	cases := []struct {
		name, want string
		env        map[string]string
		args       []string
	}{
		{"unreachable redis", "flashsale: invalid REDIS_URL", map[string]string{"REDIS_URL": "redis://127.0.0.1:" + closedPort(t) + "/0", "JWT_SECRET": realSecret}, nil},
		// Without sslmode pgx tries with and without TLS: two failures, on lines of their own.
		{"unreachable postgres", "flashsale: invalid DATABASE_URL", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:" + closedPort(t) + "/x", "REDIS_URL": "redis://127.0.0.1:" + closedPort(t) + "/0", "JWT_SECRET": realSecret}, nil},
		{"unreachable postgres hosts", "flashsale: invalid DATABASE_URL", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:" + closedPort(t) + ",127.0.0.1:" + closedPort(t) + "/x?sslmode=disable", "REDIS_URL": "redis://127.0.0.1:" + closedPort(t) + "/0", "JWT_SECRET": realSecret}, nil},
		{"real mode without secret", "flashsale: invalid JWT_SECRET", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x", "REDIS_URL": "redis://127.0.0.1:1/0"}, nil},
		{"real mode with a 3-byte secret", "flashsale: invalid JWT_SECRET: want at least 32 bytes", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x", "REDIS_URL": "redis://127.0.0.1:1/0", "JWT_SECRET": "abc"}, nil},
		{"real mode on the in-process redis", "flashsale: invalid REDIS_URL: required when DATABASE_URL is set", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x", "JWT_SECRET": realSecret}, nil},
		{"redis url without scheme", "flashsale: invalid REDIS_URL: want", map[string]string{"REDIS_URL": "//h:6379", "JWT_SECRET": realSecret}, nil},
		{"unknown flag", "flashsale: flag provided but not defined: -bogus-flag", secrets, []string{"--bogus-flag"}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" fails with one line", func(t *testing.T) {
			t.Parallel() // a process and a temporary directory of its own
			// The "starting" record is info; above it nothing else may print.
			// The node binds before it reaches the database: a port of its
			// own, or the cases beside it (and anything on :8080) take it.
			env := map[string]string{"LOG_LEVEL": "warn", "HTTP_ADDR": "127.0.0.1:0"}
			for k, v := range tc.env {
				env[k] = v
			}
			stderr, code := runBinary(t, bin, env, tc.args...)
			var lines []string
			for _, l := range strings.Split(stderr, "\n") {
				if strings.TrimSpace(l) != "" {
					lines = append(lines, l)
				}
			}
			if code == 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant one line starting %q", code, stderr, tc.want)
			}
			for _, secret := range []string{"topsecret-value", "pgsecret"} {
				if strings.Contains(stderr, secret) {
					t.Fatalf("stderr shows %q: %s", secret, stderr)
				}
			}
		})
	}
}

func TestHelpExitsZeroWithoutSecrets(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	env := map[string]string{"JWT_SECRET": "topsecret-value-0123456789abcdef0", "DATABASE_URL": "postgres://postgres:pgsecret@127.0.0.1:5432/x", "REDIS_URL": "redis://:redissecret@127.0.0.1:6379/0"}
	for _, arg := range []string{"-h", "--help"} {
		t.Run(arg+" prints the usage without secrets and exits 0", func(t *testing.T) {
			t.Parallel()
			stderr, code := runBinary(t, bin, env, arg)
			if code != 0 || !strings.Contains(stderr, "-jwt-secret") {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 0 and the usage", code, stderr)
			}
			for _, secret := range []string{"topsecret-value", "pgsecret", "redissecret"} {
				if strings.Contains(stderr, secret) {
					t.Fatalf("usage shows %q:\n%s", secret, stderr)
				}
			}
		})
	}
}
