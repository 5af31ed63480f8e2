package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// scrape reads /metrics into series → value, a series named as exposed:
// `flashsale_grab_total{code="OK"}`.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// logLines decodes the service's JSON log lines; other output (a banner)
// is skipped.
func logLines(out string) []map[string]any {
	var lines []map[string]any
	for _, l := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] != nil {
			lines = append(lines, m)
		}
	}
	return lines
}

func findLog(t *testing.T, out, msg string) map[string]any {
	t.Helper()
	for _, l := range logLines(out) {
		if l["msg"] == msg {
			return l
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, out)
	return nil
}

// saleEnv starts the service binary on its own Redis and database, with
// JSON logs; it returns the process, an admin token and the token maker.
func saleEnv(t *testing.T, extra map[string]string) (*process, *auth.Tokens, string, map[string]string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the service as a process")
	}
	bin := buildBinary(t)
	redisSrv := testenv.MustRedis(t)
	dbURL := testenv.MustPostgresURL(t)
	const secret = "ops-test-secret-not-for-logs-0123456"
	env := map[string]string{
		"REDIS_URL": redisSrv.URL(), "DATABASE_URL": dbURL, "JWT_SECRET": secret, "LOG_FORMAT": "json",
		"GRAB_TIMEOUT": "2s",
	}
	for k, v := range extra {
		env[k] = v
	}
	tokens := auth.NewTokens(secret)
	admin, _ := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, time.Hour)
	p := startProcess(t, bin, env)
	env["secret"] = secret
	return p, tokens, admin, env
}

func createVoucher(t *testing.T, base, admin string, stock int) string {
	t.Helper()
	created := postQuery(t, base, admin, fmt.Sprintf(`mutation { createVoucher(input: {shopId: "1", title: "ops", payValue: 1, actualValue: 2, type: SECKILL, stock: %d, beginAt: "2026-01-01T00:00:00Z", endAt: "2099-01-01T00:00:00Z"}) { id } }`, stock))
	return created["createVoucher"].(map[string]any)["id"].(string)
}

// TestMetricsAfterASale runs a small sale through the real service (Redis,
// Postgres, HTTP) and checks that /metrics shows every metric an operator
// watches a sale by (the table below) with values that match the sale; and
// that the start-up logs say what the node connected to, with durations as
// text and no secret or token.
func TestMetricsAfterASale(t *testing.T) {
	t.Parallel()
	p, tokens, admin, env := saleEnv(t, map[string]string{"RATE_USER_PER_SEC": "1", "LOG_LEVEL": "debug"})
	const stock, users = 40, 60
	voucherID := createVoucher(t, p.Base, admin, stock)

	client := &http.Client{Timeout: 10 * time.Second}
	// One user grabs twice at once, while stock is left: the second is
	// over RATE_USER_PER_SEC=1 (after the sale memory would answer it
	// SOLD_OUT without asking the limits).
	first, _ := tokens.Issue(auth.Identity{UserID: 99, Role: auth.RoleUser}, time.Hour)
	codes := map[string]int{}
	for range 2 {
		codes[grabCode(t, p.Base, first, voucherID)]++
	}
	if codes["OK"] != 1 || codes["RATE_LIMITED"] != 1 {
		t.Fatalf("a user's two grabs within a second: %v; want OK then RATE_LIMITED", codes)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	issued := []string{first}
	for u := int64(100); u < 100+users; u++ {
		tok, _ := tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
		issued = append(issued, tok)
		wg.Go(func() {
			code, _, err := p.grab(client, tok, voucherID)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes["OK"] != stock || codes["SOLD_OUT"] != users+1-stock {
		t.Fatalf("codes %v; want %d OK and %d SOLD_OUT", codes, stock, users+1-stock)
	}

	// The writer samples the lag after each batch and once a second while
	// the logs are quiet: wait for it to come back to 0.
	var m map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		m = scrape(t, p.Base)
		if m["flashsale_orders_persisted_total"] == stock && m["flashsale_order_log_lag"] == 0 && m["flashsale_order_log_lag_seconds"] == 0 && m["flashsale_order_log_pending"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order log not drained in /metrics: persisted %v lag %v lag_seconds %v pending %v",
				m["flashsale_orders_persisted_total"], m["flashsale_order_log_lag"], m["flashsale_order_log_lag_seconds"], m["flashsale_order_log_pending"])
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, tc := range []struct {
		name   string
		series string
		check  func(v float64) bool
		want   string
	}{
		{"grabs answered by code: OK", `flashsale_grab_total{code="OK"}`, eq(stock), fmt.Sprint(stock)},
		{"grabs answered by code: SOLD_OUT", `flashsale_grab_total{code="SOLD_OUT"}`, eq(users + 1 - stock), fmt.Sprint(users + 1 - stock)},
		{"grabs answered by code: RATE_LIMITED", `flashsale_grab_total{code="RATE_LIMITED"}`, eq(1), "1"},
		{"grab latency: one observation per OK", `flashsale_grab_duration_seconds_count{code="OK"}`, eq(stock), fmt.Sprint(stock)},
		{"grab latency: positive total", `flashsale_grab_duration_seconds_sum{code="OK"}`, gt(0), "> 0"},
		{"grab latency: every OK within GRAB_TIMEOUT", `flashsale_grab_duration_seconds_bucket{code="OK",le="2.5"}`, eq(stock), fmt.Sprint(stock)},
		{"batch sizes: batches sent", `flashsale_grab_batch_size_count`, gt(0), "> 0"},
		{"batch sizes: every grab that reached Redis", `flashsale_grab_batch_size_sum`, ge(stock), fmt.Sprintf(">= %d", stock)},
		{"script latency: grab", `flashsale_redis_script_duration_seconds_count{script="grab"}`, gt(0), "> 0"},
		{"script latency: claim", `flashsale_redis_script_duration_seconds_count{script="claim"}`, gt(0), "> 0"},
		{"redis errors: none in a healthy sale", `flashsale_redis_errors_total{op="script"}`, eq(0), "0"},
		{"redis errors: stream class exposed", `flashsale_redis_errors_total{op="stream"}`, eq(0), "0"},
		{"redis errors: other commands", `flashsale_redis_errors_total{op="other"}`, eq(0), "0"},
		{"redis errors: probes", `flashsale_redis_errors_total{op="ping"}`, eq(0), "0"},
		{"order log lag: entries", `flashsale_order_log_lag`, eq(0), "0"},
		{"order log lag: seconds", `flashsale_order_log_lag_seconds`, eq(0), "0"},
		{"order log pending", `flashsale_order_log_pending`, eq(0), "0"},
		{"writer batch size: batches", `flashsale_order_write_batch_size_count`, gt(0), "> 0"},
		{"writer batch size: every order", `flashsale_order_write_batch_size_sum`, ge(stock), fmt.Sprintf(">= %d", stock)},
		{"writer latency", `flashsale_order_write_duration_seconds_count`, gt(0), "> 0"},
		{"orders persisted", `flashsale_orders_persisted_total`, eq(stock), fmt.Sprint(stock)},
		{"dead letters by reason", `flashsale_orders_dead_total{reason="over_stock"}`, eq(0), "0"},
		{"actors alive", `flashsale_actors_alive`, ge(1), ">= 1"},
		{"subscriptions open", `flashsale_subscriptions_open`, eq(0), "0"},
		{"rate-limit refusals: user (counted in memory)", `flashsale_user_rate_limit_refusals_total`, eq(1), "1"},
		{"records of sales: none dropped in a healthy sale", `flashsale_grab_sale_memory_dropped_total`, eq(0), "0"},
		{"rate-limit refusals: voucher", `flashsale_rate_limit_refusals_total{kind="voucher"}`, eq(0), "0"},
		{"breaker state", `flashsale_breaker_state{store="redis"}`, eq(0), "0 (closed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := m[tc.series]
			if !ok {
				t.Fatalf("%s missing from /metrics", tc.series)
			}
			if !tc.check(v) {
				t.Fatalf("%s = %v, want %s", tc.series, v, tc.want)
			}
		})
	}

	t.Run("start-up logs: what it connected to, durations as text, no secret", func(t *testing.T) {
		out := p.Output()
		c := findLog(t, out, "connected")
		for k, want := range map[string]any{"mode": "real", "lock_nodes": 1.0, "cluster_provider": "test", "http_addr": strings.TrimPrefix(p.Base, "http://")} {
			if c[k] != want {
				t.Errorf("connected line: %s = %v, want %v", k, c[k], want)
			}
		}
		if !strings.HasPrefix(env["REDIS_URL"], "redis://"+c["redis"].(string)) {
			t.Errorf("connected line: redis = %v, from REDIS_URL %s", c["redis"], env["REDIS_URL"])
		}
		if db, _ := c["database"].(string); db == "" || strings.Contains(db, "@") || strings.Contains(db, "password") {
			t.Errorf("connected line: database = %q; want host and name only", db)
		}
		if v, _ := findLog(t, out, "starting")["version"].(string); !strings.HasPrefix(v, "flashsale ") {
			t.Errorf("starting line: version = %q", v)
		}
		cfg := map[string]any{}
		for _, l := range logLines(out) {
			if l["msg"] == "setting" {
				cfg[l["name"].(string)] = l["value"]
			}
		}
		if cfg["grab_timeout"] != "2s" || cfg["order_log_drain_timeout"] != "5s" {
			t.Errorf("config durations: grab_timeout %#v, order_log_drain_timeout %#v; want text (2s, 5s)", cfg["grab_timeout"], cfg["order_log_drain_timeout"])
		}
		if strings.Contains(out, env["secret"]) {
			t.Error("the JWT secret is in the logs")
		}
		for _, tok := range append(issued, admin) {
			if strings.Contains(out, tok) || strings.Contains(out, tok[strings.LastIndexByte(tok, '.')+1:]) {
				t.Fatal("a token (or its signature) is in the logs")
			}
		}
	})
}

// grabCode grabs and returns the answer's code, or the error's code (a
// rate-limited grab is a RATE_LIMITED error, not data).
func grabCode(t *testing.T, base, token, voucherID string) string {
	t.Helper()
	var out struct {
		Data   *struct{ SeckillVoucher *struct{ Code string } }
		Errors []struct{ Extensions struct{ Code string } }
	}
	postGraphQL(t, base, token, map[string]any{
		"query":     `mutation($id: ID!) { seckillVoucher(voucherId: $id) { code } }`,
		"variables": map[string]any{"id": voucherID},
	}, &out)
	if len(out.Errors) > 0 {
		return out.Errors[0].Extensions.Code
	}
	if out.Data == nil || out.Data.SeckillVoucher == nil {
		t.Fatal("grab: neither data nor errors")
	}
	return out.Data.SeckillVoucher.Code
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func gt(min float64) func(float64) bool  { return func(v float64) bool { return v > min } }
func ge(min float64) func(float64) bool  { return func(v float64) bool { return v >= min } }

// TestSIGTERMUnderLoadLosesNothing sends SIGTERM to the service in the
// middle of a sale from 16 concurrent clients and checks that it exits 0,
// that every grab answered OK is in the database exactly once, and that
// every order in the database was answered OK: a grab the node accepted
// got its answer, not a reset (grabs sent after the listener closed fail
// to connect, and sell nothing).
func TestSIGTERMUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	p, tokens, admin, env := saleEnv(t, map[string]string{"ORDER_LOG_CLAIM_IDLE": "1h"})
	voucherID := createVoucher(t, p.Base, admin, 100000)

	type answer struct {
		user    int64
		orderID string
	}
	var (
		mu        sync.Mutex
		oks       []answer
		transport int // transport errors after SIGTERM
		early     []error
		sent      = make(chan struct{})
		wg        sync.WaitGroup
	)
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for w := int64(0); w < 16; w++ {
		wg.Go(func() {
			for u := w*100000 + 1000; ; u++ {
				tok, _ := tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
				code, id, err := p.grab(client, tok, voucherID)
				mu.Lock()
				switch {
				case err != nil:
					select {
					case <-sent:
						transport++
						mu.Unlock()
						return // the listener is closed: this worker is done
					default:
						early = append(early, err)
					}
				case code == "OK":
					oks = append(oks, answer{u, id})
				}
				mu.Unlock()
			}
		})
	}
	for {
		mu.Lock()
		n, e := len(oks), len(early)
		mu.Unlock()
		if n >= 300 || e > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(sent)
	code, err := p.Stop(syscall.SIGTERM, 30*time.Second)
	wg.Wait()
	if err != nil {
		t.Fatalf("%v; output ends:\n%s", err, tail(p.Output(), 3000))
	}
	if len(early) > 0 {
		t.Fatalf("%d grabs failed before SIGTERM, first: %v", len(early), early[0])
	}
	if code != 0 {
		t.Fatalf("exit code %d after SIGTERM; output ends:\n%s", code, tail(p.Output(), 3000))
	}

	db := testenv.MustOpen(t, env["DATABASE_URL"])
	var rows []struct {
		ID     int64 `bun:"id"`
		UserID int64 `bun:"user_id"`
	}
	if err := db.NewSelect().Table("tb_voucher_order").Column("id", "user_id").Where("voucher_id = ?", voucherID).Scan(context.Background(), &rows); err != nil {
		t.Fatal(err)
	}
	inDB := make(map[string]int64, len(rows))
	for _, r := range rows {
		inDB[strconv.FormatInt(r.ID, 10)] = r.UserID
	}
	for _, a := range oks {
		if u, ok := inDB[a.orderID]; !ok || u != a.user {
			t.Errorf("order %s answered OK to user %d: in the database %v (user %d)", a.orderID, a.user, ok, u)
		}
	}
	if len(rows) != len(oks) {
		t.Errorf("%d orders in the database, %d answered OK", len(rows), len(oks))
	}
	var perUser []int
	if err := db.NewSelect().Table("tb_voucher_order").ColumnExpr("count(*)").Where("voucher_id = ?", voucherID).Group("user_id").Having("count(*) > 1").Scan(context.Background(), &perUser); err != nil {
		t.Fatal(err)
	}
	if len(perUser) > 0 {
		t.Errorf("%d users hold more than one order", len(perUser))
	}
	done := findLog(t, p.Output(), "shut down")
	if done["order_log_drained"] != true {
		t.Errorf("shutdown line: order_log_drained = %v, want true", done["order_log_drained"])
	}
	// The counters count the whole run, not only the drain: JSON numbers.
	if n, _ := done["grabs_answered"].(float64); int(n) < len(oks) {
		t.Errorf("shutdown line: grabs_answered = %v, want at least the %d OK", done["grabs_answered"], len(oks))
	}
	if n, _ := done["orders_persisted"].(float64); int(n) != len(rows) {
		t.Errorf("shutdown line: orders_persisted = %v, want the %d orders in the database", done["orders_persisted"], len(rows))
	}
	if d, _ := done["duration"].(string); d == "" {
		t.Errorf("shutdown line: duration = %#v, want text", done["duration"])
	}
	t.Logf("%d OK before and during the drain, %d clients refused after the close; shutdown: %v", len(oks), transport, done)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
