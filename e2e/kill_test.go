package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// process is the service running as a real OS process.
type process struct{ *testenv.Service }

// binDir holds the binary built once for all the tests that run the
// service as a process; TestMain removes it.
var binDir string

// builtBinary builds the service once per test binary: the tests that run
// it run side by side, and one build is what they all need.
var builtBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "flashsale-test-")
	if err != nil {
		return "", err
	}
	binDir = dir
	return testenv.BuildService(dir)
})

func buildBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := builtBinary()
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The process tests mostly wait (for a failover, an outage to end, a
	// node to restart), so three at a time share two cores better than
	// go test's default of one per core; -parallel on the command line
	// still decides.
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "3")
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func startProcess(t *testing.T, bin string, env map[string]string) *process {
	t.Helper()
	s, err := testenv.StartService(t.Context(), bin, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return &process{s}
}

// grab is one grab without an idempotency key.
func (p *process) grab(client *http.Client, token, voucherID string) (code, orderID string, err error) {
	return grabWithKey(client, p.Base, token, voucherID, "")
}

// killRig gives a kill test the service binary, its own Redis and
// database, the environment of a node on them and its token issuer.
func killRig(t *testing.T) (bin string, redisSrv *testenv.RedisServer, dbURL string, env map[string]string, tokens *auth.Tokens) {
	t.Helper()
	bin = buildBinary(t)
	redisSrv = testenv.MustRedis(t)
	dbURL = testenv.MustPostgresURL(t)
	const secret = "kill-test-secret-0123456789abcdef"
	env = map[string]string{
		"REDIS_URL": redisSrv.URL(), "DATABASE_URL": dbURL, "JWT_SECRET": secret,
		"ORDER_LOG_CLAIM_IDLE": "1s", "LOG_LEVEL": "warn",
		"SHED_IP_PER_SEC": "0", // one address stands for every buyer of the sale
	}
	return bin, redisSrv, dbURL, env, auth.NewTokens(secret)
}

// TestKillDashNineLosesNoOrder kills the service with SIGKILL in the middle
// of a sale, right after it has answered OKs, restarts it, and checks that
// every order it answered OK reaches the database exactly once and that
// stock reconciles.
func TestKillDashNineLosesNoOrder(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the service as a process")
	}
	bin, redisSrv, dbURL, env, tokens := killRig(t)
	admin, _ := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, time.Hour)
	first := startProcess(t, bin, env)
	const stock = 3000
	created := postQuery(t, first.Base, admin, fmt.Sprintf(`mutation { createVoucher(input: {shopId: "1", title: "k", payValue: 1, actualValue: 2, type: SECKILL, stock: %d, beginAt: "2026-01-01T00:00:00Z", endAt: "2099-01-01T00:00:00Z"}) { id } }`, stock))
	voucherID := created["createVoucher"].(map[string]any)["id"].(string)

	var (
		mu       sync.Mutex
		okOrders = map[string]int64{}
		wg       sync.WaitGroup
		killed   = make(chan struct{})
	)
	client := &http.Client{Timeout: 5 * time.Second}
	for w := 0; w < 32; w++ {
		wg.Go(func() {
			for u := int64(w*1000 + 1); u <= int64(w*1000+1000); u++ {
				select {
				case <-killed:
					return
				default:
				}
				tok, _ := tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
				code, id, err := first.grab(client, tok, voucherID)
				if err == nil && code == "OK" {
					mu.Lock()
					okOrders[id] = u
					mu.Unlock()
				}
			}
		})
	}
	for {
		mu.Lock()
		n := len(okOrders)
		mu.Unlock()
		if n >= 500 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	first.Kill() // SIGKILL, mid-sale
	close(killed)
	wg.Wait()

	startProcess(t, bin, env) // the restarted node reclaims the order log
	db := testenv.MustOpen(t, dbURL)
	ctx := context.Background()
	rdb := redisSrv.Client()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// The log first: the writer commits before it deletes entries, so
		// once the log is empty the database holds every order. (Read the
		// other way round, a batch committed between the two reads would
		// be missing from ids and absent from the log.)
		inflight, err := rdb.XLen(ctx, "{v"+voucherID+"}:log").Result()
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		if err := db.NewSelect().Table("tb_voucher_order").Column("id").Where("voucher_id = ?", voucherID).Scan(ctx, &ids); err != nil {
			t.Fatal(err)
		}
		inDB := make(map[string]bool, len(ids))
		for _, id := range ids {
			inDB[strconv.FormatInt(id, 10)] = true
		}
		missing := 0
		for id := range okOrders {
			if !inDB[id] {
				missing++
			}
		}
		remaining, _ := rdb.Get(ctx, "{v"+voucherID+"}:stock").Int()
		if missing == 0 && inflight == 0 {
			// Orders whose answer the kill cut off are in the database too
			// (the stock was taken); nothing else is.
			if remaining+len(ids) != stock {
				t.Fatalf("stock %d != remaining %d + orders %d", stock, remaining, len(ids))
			}
			var dbStock int
			if err := db.NewSelect().Table("tb_seckill_voucher").Column("stock").Where("voucher_id = ?", voucherID).Scan(ctx, &dbStock); err != nil {
				t.Fatal(err)
			}
			if dbStock != remaining {
				t.Fatalf("database stock %d, redis remaining %d", dbStock, remaining)
			}
			t.Logf("%d orders answered OK before the kill, %d in the database", len(okOrders), len(ids))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d OK'd orders still missing from the database (%d in flight)", missing, inflight)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
