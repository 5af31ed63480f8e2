package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// The cluster of real processes, so that segment ownership and failover
// are tested across process boundaries: members found through
// protoactor's automanaged provider (static seeds), one stock Redis with
// AOF, three lock Redis nodes for Redlock, one Postgres. Each test runs a
// whole sale through the members' HTTP endpoints.

type clusterRig struct {
	t     *testing.T
	bin   string
	env   map[string]string
	seeds []string // automanaged ports of up to 4 members
	// held keeps each seed port taken until its member starts (start
	// lets it go): a member may join 30 s after the rig chose its port,
	// and another test's socket could take a port left free that long.
	held    []*heldPort
	stock   *testenv.RedisServer
	dbURL   string
	tokens  *auth.Tokens
	admin   string
	members []*process
}

func newClusterRig(t *testing.T) *clusterRig {
	t.Helper()
	rig := &clusterRig{t: t, bin: buildBinary(t), stock: testenv.MustDurableRedis(t), dbURL: testenv.MustPostgresURL(t)}
	var locks []string
	for range 3 {
		locks = append(locks, testenv.MustRedis(t).URL())
	}
	for range 4 {
		h := holdPort(t)
		rig.held = append(rig.held, h)
		rig.seeds = append(rig.seeds, h.addr)
	}
	const secret = "cluster-test-secret-0123456789abcdef"
	rig.env = map[string]string{
		"REDIS_URL": rig.stock.URL(), "LOCK_REDIS_URLS": strings.Join(locks, ","), "DATABASE_URL": rig.dbURL,
		"JWT_SECRET": secret, "ORDER_LOG_CLAIM_IDLE": "1s", "LOG_LEVEL": cmp.Or(os.Getenv("CLUSTER_TEST_LOG_LEVEL"), "warn"),
		"CLUSTER_PROVIDER": "automanaged", "CLUSTER_NAME": "c" + strconv.FormatInt(time.Now().UnixNano(), 36),
		"CLUSTER_SEEDS": strings.Join(rig.seeds, ","), "SEGMENT_LEASE_TTL": "2s",
		"SHED_IP_PER_SEC": "0", // one address stands for every buyer of the sale
		"GOTRACEBACK":     "all",
	}
	rig.tokens = auth.NewTokens(secret)
	rig.admin, _ = rig.tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, time.Hour)
	return rig
}

func freeTCPPort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// heldPort is a loopback port kept taken by a listener that closes every
// connection at once: the members polling a seed that has not started
// yet see it down at once, as they would a closed port.
type heldPort struct {
	addr string
	l    net.Listener
	once sync.Once
}

func holdPort(tb testing.TB) *heldPort {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	h := &heldPort{addr: l.Addr().String(), l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	tb.Cleanup(h.release)
	return h
}

// release lets the port go, for its member to bind.
func (h *heldPort) release() { h.once.Do(func() { _ = h.l.Close() }) }

// start starts member i (0..3) and returns it.
func (rig *clusterRig) start(i int) *process {
	rig.held[i].release()
	env := map[string]string{}
	for k, v := range rig.env {
		env[k] = v
	}
	_, port, _ := net.SplitHostPort(rig.seeds[i])
	env["CLUSTER_AUTOMANAGED_PORT"] = port
	env["NODE_ID"] = "member-" + strconv.Itoa(i)
	p := startProcess(rig.t, rig.bin, env)
	rig.members = append(rig.members, p)
	rig.t.Cleanup(func() { rig.dumpOnFailure(env["NODE_ID"], p) })
	return p
}

// dumpOnFailure writes a failed test's member output to a file beside the
// test's others and logs where, with the member's voucher actors and
// grab answers when it still runs: a stalled member is read from outside.
func (rig *clusterRig) dumpOnFailure(name string, p *process) {
	t := rig.t
	if !t.Failed() {
		return
	}
	if p.Running() {
		if resp, err := http.Get(p.Base + "/metrics"); err == nil {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "flashsale_actors_alive") || strings.HasPrefix(line, "flashsale_segment") ||
					strings.HasPrefix(line, "flashsale_cluster_segments_hosted") || strings.HasPrefix(line, "flashsale_grab_total") {
					t.Logf("%s: %s", name, line)
				}
			}
			resp.Body.Close()
		}
		// Its goroutines, to read where a stalled member waits: SIGQUIT
		// prints them all (GOTRACEBACK=all) and ends the process.
		_, _ = p.Stop(syscall.SIGQUIT, 3*time.Second)
	} else {
		// It ended by itself: its last lines say why, in the test's own
		// log (a fresh machine's files are gone once its check ends).
		lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
		for _, l := range lines[max(0, len(lines)-15):] {
			t.Logf("%s (ended): %s", name, l)
		}
	}
	f, err := os.CreateTemp("", "flashsale-"+name+"-*.log")
	if err == nil {
		_, _ = f.WriteString(p.Output())
		_ = f.Close()
		t.Logf("%s: output in %s", name, f.Name())
	}
}

// waitMembers waits until the member's /metrics show n cluster members.
func waitClusterMembers(t *testing.T, n int, ps ...*process) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range ps {
		for {
			_, body := getStatus(t, p.Base+"/metrics")
			if strings.Contains(body, "flashsale_cluster_members "+strconv.Itoa(n)+"\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not see %d members", p.Base, n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (rig *clusterRig) voucher(entry *process, stock, segments int) string {
	created := postQuery(rig.t, entry.Base, rig.admin, fmt.Sprintf(`mutation { createVoucher(input: {shopId: "1", title: "c", payValue: 1, actualValue: 2, type: SECKILL, stock: %d, segments: %d, beginAt: "2026-01-01T00:00:00Z", endAt: "2099-01-01T00:00:00Z"}) { id } }`, stock, segments))
	return created["createVoucher"].(map[string]any)["id"].(string)
}

// clusterSale fires users × attempts grabs over the live members (user u
// enters at member u mod n of the members alive at that moment). Each
// attempt carries its own request id: a grab cut off by a member's death
// is asked again at another member with the same id, which answers what
// the first one did (the script sells once per request id). during runs
// after every ok'd order count in at (one callback per threshold).
type clusterSale struct {
	mu       sync.Mutex
	ok       map[string]int64 // order id -> user
	perUser  map[int64]int
	codes    map[string]int
	retries  atomic.Int64
	entries  []*process
	oks      atomic.Int64
	inflight sync.WaitGroup
}

func (rig *clusterRig) sale(voucherID string, users, attempts int, entries []*process, at map[int64]func(s *clusterSale)) *clusterSale {
	s := &clusterSale{ok: map[string]int64{}, perUser: map[int64]int{}, codes: map[string]int{}, entries: entries}
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var next atomic.Int64
	var hooks sync.Mutex
	for range 48 {
		s.inflight.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(users*attempts) {
					return
				}
				u, attempt := i/int64(attempts)+2, i%int64(attempts)
				tok, _ := rig.tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
				req := fmt.Sprintf("a%d", attempt)
				var code, id string
				// A segment whose member died answers UNAVAILABLE until its
				// lease expires (SEGMENT_LEASE_TTL, 3 s) and a new member
				// takes it (up to the TTL and a second more), longer under
				// -race on a busy machine: a client retrying with the same
				// requestId for 30 s learns the first outcome, which counting
				// tries (21, about 3 s) did not always reach.
				giveUp := time.Now().Add(30 * time.Second)
				for try := 0; ; try++ {
					s.mu.Lock()
					p := s.entries[int(u+int64(try))%len(s.entries)]
					s.mu.Unlock()
					var err error
					if code, id, err = grabWithKey(client, p.Base, tok, voucherID, req); err == nil && code != "UNAVAILABLE" {
						break
					}
					if time.Now().After(giveUp) {
						rig.t.Logf("user %d gave up after %d tries: last answer %q, error %v", u, try+1, code, err)
						code = "UNAVAILABLE"
						break
					}
					s.retries.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
				s.mu.Lock()
				s.codes[code]++
				if code == "OK" {
					if _, seen := s.ok[id]; !seen {
						s.perUser[u]++
						s.ok[id] = u
						n := s.oks.Add(1)
						if f := at[n]; f != nil {
							s.mu.Unlock()
							hooks.Lock()
							f(s)
							hooks.Unlock()
							s.mu.Lock()
						}
					}
				}
				s.mu.Unlock()
			}
		})
	}
	s.inflight.Wait()
	return s
}

func (s *clusterSale) setEntries(ps []*process) {
	s.mu.Lock()
	s.entries = ps
	s.mu.Unlock()
}

func grabWithKey(client *http.Client, base, token, voucherID, requestID string) (code, orderID string, err error) {
	vars := map[string]any{"id": voucherID}
	if requestID != "" {
		vars["r"] = requestID
	}
	body, _ := json.Marshal(map[string]any{
		"query":     `mutation($id: ID!, $r: String) { seckillVoucher(voucherId: $id, requestId: $r) { code orderId } }`,
		"variables": vars,
	})
	req, _ := http.NewRequest(http.MethodPost, base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			SeckillVoucher struct{ Code, OrderID string }
		}
		Errors []struct{ Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", "", err
	}
	if len(out.Errors) > 0 {
		return "", "", fmt.Errorf("%s", out.Errors[0].Message)
	}
	return out.Data.SeckillVoucher.Code, out.Data.SeckillVoucher.OrderID, nil
}

// verify checks the invariants once the order log has drained: exactly
// stock OK'd orders, one per user, every one in Postgres once and nothing
// else there, a balanced reconciliation, and each segment's fencing token
// taken at most maxFence times.
func (rig *clusterRig) verify(s *clusterSale, voucherID string, stock, segments, maxFence int, entry *process) {
	t := rig.t
	t.Helper()
	if len(s.ok) != stock {
		t.Errorf("%d OK'd orders, want exactly %d (codes %v)", len(s.ok), stock, s.codes)
	}
	for u, n := range s.perUser {
		if n > 1 {
			t.Errorf("user %d got %d orders, limit 1", u, n)
		}
	}
	db := testenv.MustOpen(t, rig.dbURL)
	rdb := redis.NewClient(&redis.Options{Addr: rig.stock.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	var rows []struct {
		ID     int64 `bun:"id"`
		UserID int64 `bun:"user_id"`
	}
	for {
		inflight, err := rdb.XLen(ctx, "{v"+voucherID+"}:log").Result()
		if err != nil {
			t.Fatal(err)
		}
		rows = rows[:0]
		if err := db.NewSelect().Table("tb_voucher_order").Column("id", "user_id").Where("voucher_id = ?", voucherID).Scan(ctx, &rows); err != nil {
			t.Fatal(err)
		}
		if inflight == 0 && len(rows) >= len(s.ok) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orders in the database, %d OK'd, %d still in the order log after 60 s", len(rows), len(s.ok), inflight)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(rows) != stock {
		t.Errorf("%d orders in the database, want %d", len(rows), stock)
	}
	for _, r := range rows {
		if u, ok := s.ok[strconv.FormatInt(r.ID, 10)]; !ok || u != r.UserID {
			t.Errorf("database order %d (user %d) was not OK'd to that user", r.ID, r.UserID)
		}
	}
	rec := postReport(t, entry.Base, rig.admin, fmt.Sprintf(`{ reconciliation(voucherId: %q) { balanced remaining liveOrders inFlightOrders usersOff } }`, voucherID))
	if r := rec["reconciliation"].(map[string]any); r["balanced"] != true || r["remaining"] != float64(0) {
		t.Errorf("reconciliation %v", r)
	}
	// An activation that ends for a cause its member reports (a call left
	// undecided, a lease it could not renew: both more frequent on a
	// loaded machine) is replaced by one that takes a new token: the live
	// members' counts of those widen the bound, so that only churn nobody
	// explains fails it.
	s.mu.Lock()
	live := slices.Clone(s.entries)
	s.mu.Unlock()
	explained := 0
	for _, p := range live {
		m := scrape(t, p.Base)
		explained += int(m["flashsale_grab_undecided_calls_total"] + m["flashsale_segment_lease_lost_total"])
	}
	t.Logf("activations the live members saw end on an undecided call or a lost lease: %d", explained)
	for seg := range segments {
		key := "{v" + voucherID + "}:fence"
		if seg > 0 {
			key += ":" + strconv.Itoa(seg)
		}
		f, _ := rdb.Get(ctx, key).Int()
		t.Logf("segment %d: fencing token taken %d times", seg, f)
		if f < 1 || f > maxFence+explained {
			t.Errorf("segment %d's fencing token taken %d times, want 1..%d (%d, and %d activations the live members saw end on an undecided call or a lost lease)",
				seg, f, maxFence+explained, maxFence, explained)
		}
	}
	t.Logf("codes %v, %d retries at another member", s.codes, s.retries.Load())
}

// threeMembers starts a cluster of three member processes (parallel to
// other tests) and waits until each sees the others.
func threeMembers(t *testing.T) (rig *clusterRig, a, b, c *process) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	rig = newClusterRig(t)
	a, b, c = rig.start(0), rig.start(1), rig.start(2)
	waitClusterMembers(t, 3, a, b, c)
	return rig, a, b, c
}

// Three members, one voucher of four segments, 600 units, 3,000 users
// grabbing twice each through all three members (3,000 units and 30,000
// users under make long): exactly the stock sold, one per user, all in
// Postgres, reconciliation balanced, and each segment's fencing token
// taken a handful of times (one owner per segment; the single-node design
// measured 338 for a 3-node sale).
func TestClusterOfThreeProcessesSellsExactly(t *testing.T) {
	rig, a, b, c := threeMembers(t)
	// 6,000 grabs; 60,000 under make long.
	stock, segs := testenv.Size(600, 3000), 4
	id := rig.voucher(a, stock, segs)
	s := rig.sale(id, testenv.Size(3000, 30_000), 2, []*process{a, b, c}, nil)
	rig.verify(s, id, stock, segs, 3, a)
}

// A fourth member joins in the middle of a sale, and later one member is
// killed with SIGKILL: no unit is oversold, every OK'd order reaches
// Postgres (the dead member's pending order-log entries are claimed by the
// others), and its segments are served elsewhere within seconds (the sale
// sells out).
func TestClusterMembersJoinAndDieMidSale(t *testing.T) {
	rig, a, b, c := threeMembers(t)
	// The member joins after a sixth of the stock is sold and another dies
	// before two thirds are: 5,000 grabs; 12,000 under make long.
	stock, segs := testenv.Size(1500, 3000), 8
	id := rig.voucher(a, stock, segs)
	var d *process
	join, kill := int64(stock/6), int64(stock*3/5)
	s := rig.sale(id, testenv.Size(5000, 12_000), 1, []*process{a, b, c}, map[int64]func(*clusterSale){
		join: func(s *clusterSale) {
			d = rig.start(3) // joins
			waitClusterMembers(t, 4, a, b, c, d)
			s.setEntries([]*process{a, b, c, d})
		},
		kill: func(s *clusterSale) {
			b.Kill() // SIGKILL mid-sale
			s.setEntries([]*process{a, c, d})
		},
	})
	if d == nil {
		t.Fatalf("the sale ended before the member joined (codes %v)", s.codes)
	}
	rig.verify(s, id, stock, segs, 10, a) // a join and a death move a segment twice; each call left undecided on a loaded machine takes one more
}

// Members found through etcd (CLUSTER_PROVIDER=etcd; Debian's etcd-server,
// started here on its own ports): two members see each other, a grab
// entering at either sells, and a member that stops is dropped.
func TestClusterOverEtcd(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster of processes")
	}
	etcdURL := startEtcd(t)
	rig := newClusterRig(t)
	rig.env["CLUSTER_PROVIDER"] = "etcd"
	rig.env["ETCD_ENDPOINTS"] = etcdURL
	delete(rig.env, "CLUSTER_SEEDS")
	a, b := rig.start(0), rig.start(1)
	waitClusterMembers(t, 2, a, b)
	const stock, segs = 200, 4
	id := rig.voucher(a, stock, segs)
	s := rig.sale(id, 1000, 1, []*process{a, b}, nil)
	rig.verify(s, id, stock, segs, 1, a)
	b.Kill()
	waitClusterMembers(t, 1, a)
}

// startEtcd runs a private etcd on free loopback ports until the test ends
// and returns its client endpoint.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd not on PATH (run ./scripts/test.sh, which installs etcd-server): %v", err)
	}
	client := "http://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	peer := "http://127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	cmd := exec.Command(bin, "--data-dir", t.TempDir(), "--name", "test",
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "test="+peer)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return strings.TrimPrefix(client, "http://")
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not healthy after 20 s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// postReport runs an admin report after a sale. A node sheds reports with
// UNAVAILABLE while its grabs queue or slow down (httpapi/loadshed.go), and
// a member that has just seen another die may still be answering the grabs
// that waited on it, so a shed answer is asked again for up to 30 s; any
// other error fails the test at once.
func postReport(t *testing.T, base, token, query string) map[string]any {
	t.Helper()
	start := time.Now()
	for {
		var out struct {
			Data   map[string]any `json:"data"`
			Errors []struct {
				Message    string         `json:"message"`
				Extensions map[string]any `json:"extensions"`
			} `json:"errors"`
		}
		postGraphQL(t, base, token, map[string]any{"query": query}, &out)
		if len(out.Errors) == 0 {
			if waited := time.Since(start); waited > 0 {
				t.Logf("report answered after %v", waited.Round(time.Millisecond))
			}
			return out.Data
		}
		if out.Errors[0].Extensions["code"] != "UNAVAILABLE" || time.Since(start) > 30*time.Second {
			t.Fatalf("errors: %v", out.Errors)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
