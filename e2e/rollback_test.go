package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// A Redis restarted from an older snapshot, its keys present (what an
// everysec append-only file after a crash, or the promotion of a lagging
// replica, does), must not sell again what it forgot it sold: five units
// sold, a snapshot, five more sold and stored in Postgres, then Redis
// killed and started from the snapshot. The five later buyers retry with
// their request ids and new buyers come until the voucher is sold out.
// The voucher must sell exactly its stock, each request id must get one
// order, every OK'd order must be in Postgres and none dead-lettered.
// Without the check of the server's run id (grab.lua) it fails: 25
// distinct OK'd orders for a stock of 20, the five retried request ids
// answered with a second order, five OK'd orders dead-lettered.
func TestRedisRestartedFromAnOlderSnapshotSellsExactlyTheStock(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	sale := newKeyedSale(t, startOutageNode(t, srv, nil), 20)
	for u := int64(1); u <= 5; u++ {
		if code := sale.buy(u); code != "OK" {
			t.Fatalf("user %d before the snapshot: %s", u, code)
		}
	}
	snap := t.TempDir()
	if err := srv.SaveSnapshot(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	for u := int64(6); u <= 10; u++ {
		if code := sale.buy(u); code != "OK" {
			t.Fatalf("user %d after the snapshot: %s", u, code)
		}
	}
	eventually(t, "the ten orders in Postgres", 20*time.Second, func() bool { return sale.count("tb_voucher_order") >= 10 })
	if err := srv.RestartFromSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	for u := int64(6); u <= 10; u++ {
		sale.buy(u) // a retry: the same request id
	}
	sale.sellOut(11)
	sale.check(srv)
}

// A Redis that evicts keys loses them without a restart: its run id stays
// the same, so nothing else tells. Ten units sold with request ids and
// stored, then an operator switches maxmemory-policy to volatile-lru mid-
// sale: a new buyer must hear UNAVAILABLE, nothing is sold under it.
// Memory then runs short and Redis evicts; whichever keys it took, the
// worst for the promises is the voucher's request ids, so the test removes
// them too. The policy goes back to noeviction; the ten buyers retry their
// request ids and new buyers come until the voucher is sold out. Every
// promise holds: the stock sold exactly, one order per request id, every
// OK'd order stored. Without the policy check in the scripts (serverRunLua)
// the new buyer is sold to; without the count of evictions in the token a
// load is verified under, the ten retries are answered LIMIT_REACHED
// instead of their orders (with a limit above one, a second order each).
func TestRedisEvictingMidSaleKeepsEveryPromise(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	sale := newKeyedSale(t, startOutageNode(t, srv, nil), 20)
	for u := int64(1); u <= 10; u++ {
		if code := sale.buy(u); code != "OK" {
			t.Fatalf("user %d before the policy changed: %s", u, code)
		}
	}
	eventually(t, "the ten orders in Postgres", 20*time.Second, func() bool { return sale.count("tb_voucher_order") >= 10 })
	ctx := t.Context()
	rdb := srv.Client()
	config := func(kv ...string) {
		t.Helper()
		for i := 0; i < len(kv); i += 2 {
			if err := rdb.ConfigSet(ctx, kv[i], kv[i+1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	config("maxmemory-policy", "volatile-lru")
	if code, _, _ := sale.n.grabAs(t, 11, sale.voucher, "r11"); code != "UNAVAILABLE" {
		t.Errorf("a new buyer while redis evicts: %s, want UNAVAILABLE", code)
	}
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	config("maxmemory", strconv.FormatInt(infoInt(t, info, "used_memory")+(1<<20), 10))
	junk := strings.Repeat("x", 10<<10)
	for i := 0; infoStat(t, rdb, "evicted_keys") == 0; i++ {
		if i == 2000 {
			t.Fatal("redis evicted nothing")
		}
		if err := rdb.Set(ctx, "junk:"+strconv.Itoa(i), junk, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Del(ctx, "{v"+sale.voucher+"}:req").Err(); err != nil {
		t.Fatal(err)
	}
	config("maxmemory", "0", "maxmemory-policy", "noeviction")
	for u := int64(1); u <= 10; u++ {
		sale.buy(u) // a retry: the same request id
	}
	sale.sellOut(11)
	sale.check(srv)
}

// infoInt is a field of an INFO answer.
func infoInt(t *testing.T, info, field string) int64 {
	t.Helper()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %q", field, v)
			}
			return n
		}
	}
	t.Fatalf("INFO has no %s", field)
	return 0
}

// infoStat is a field of INFO stats.
func infoStat(t *testing.T, rdb *redis.Client, field string) int64 {
	t.Helper()
	info, err := rdb.Info(t.Context(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return infoInt(t, info, field)
}

// keyedSale is one voucher's sale through a node in which every buyer
// grabs with request id "r<user>" and asks again until the service
// decides; check then tells whether the sale kept the promises.
type keyedSale struct {
	t        *testing.T
	n        *outageNode
	db       *bun.DB
	stock    int
	voucher  string
	vid      int64
	ordersOf map[string][]string // request id -> the orders answered OK to it
	owner    map[string]int64    // order id -> user
	codes    map[string]int
	// forgotten lists the request ids answered OK once and something else
	// on a retry: a retry must get its first order.
	forgotten []string
}

func newKeyedSale(t *testing.T, n *outageNode, stock int) *keyedSale {
	t.Helper()
	s := &keyedSale{t: t, n: n, db: testenv.MustOpen(t, n.dbURL), stock: stock,
		ordersOf: map[string][]string{}, owner: map[string]int64{}, codes: map[string]int{}}
	s.voucher = n.createVoucher(t, stock)
	s.vid, _ = strconv.ParseInt(s.voucher, 10, 64)
	return s
}

// buy asks until the service decides: right after a loss, the node may
// answer UNAVAILABLE for a while (a reload holds its sales).
func (s *keyedSale) buy(user int64) string {
	t := s.t
	t.Helper()
	req := "r" + strconv.FormatInt(user, 10)
	var code, orderID string
	eventually(t, "request "+req+" decided", 20*time.Second, func() bool {
		code, orderID, _ = s.n.grabAs(t, user, s.voucher, req)
		if code == "UNAVAILABLE" {
			time.Sleep(100 * time.Millisecond)
			return false
		}
		return true
	})
	s.codes[code]++
	if code != "OK" && len(s.ordersOf[req]) > 0 {
		s.forgotten = append(s.forgotten, req+": "+code)
	}
	if code == "OK" {
		if !slices.Contains(s.ordersOf[req], orderID) {
			s.ordersOf[req] = append(s.ordersOf[req], orderID)
		}
		s.owner[orderID] = user
	}
	return code
}

// sellOut brings new buyers from first on until five in a row are told
// SOLD_OUT.
func (s *keyedSale) sellOut(first int64) {
	for u, soldOut := first, 0; soldOut < 5 && u <= first+3*int64(s.stock); u++ {
		if s.buy(u) == "SOLD_OUT" {
			soldOut++
		} else {
			soldOut = 0
		}
	}
}

// count counts the voucher's rows of a table.
func (s *keyedSale) count(table string) int {
	s.t.Helper()
	var c int
	if err := s.db.NewRaw("SELECT count(*) FROM "+table+" WHERE voucher_id = ?", s.vid).Scan(s.t.Context(), &c); err != nil {
		s.t.Fatal(err)
	}
	return c
}

// check waits for the order log to settle, then checks the promises: the
// stock sold exactly, one order per request id and a retry answered with
// it, every OK'd order stored for its user and none dead-lettered.
func (s *keyedSale) check(srv *testenv.RedisServer) {
	t, ctx, db := s.t, s.t.Context(), s.db
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	logSettled(t, ctx, rdb, "{v"+s.voucher+"}:log", func() (int, int) { return s.count("tb_voucher_order"), s.count("tb_order_dead_letter") })
	var twice []string
	for req, orders := range s.ordersOf {
		if len(orders) > 1 {
			twice = append(twice, fmt.Sprintf("%s: %v", req, orders))
		}
	}
	slices.Sort(twice)
	type row struct {
		ID     int64 `bun:"id"`
		UserID int64 `bun:"user_id"`
	}
	var rows []row
	if err := db.NewSelect().Table("tb_voucher_order").Column("id", "user_id").Where("voucher_id = ?", s.vid).Scan(ctx, &rows); err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	for _, r := range rows {
		stored[strconv.FormatInt(r.ID, 10)] = r.UserID
	}
	var deadIDs []int64
	if err := db.NewRaw("SELECT COALESCE(order_id, 0) FROM tb_order_dead_letter WHERE voucher_id = ?", s.vid).Scan(ctx, &deadIDs); err != nil {
		t.Fatal(err)
	}
	deadOK, missing := 0, 0
	for id, user := range s.owner {
		if slices.Contains(deadIDs, mustInt(t, id)) {
			deadOK++
		}
		if got, ok := stored[id]; !ok || got != user {
			missing++
		}
	}
	t.Logf("stock %d: answers %v; %d distinct OK'd orders, %d request ids with two orders %v, %d orders in Postgres, %d dead letters (%d of them OK'd), %d OK'd orders not stored for their user",
		s.stock, s.codes, len(s.owner), len(twice), twice, len(rows), len(deadIDs), deadOK, missing)
	if len(s.owner) != s.stock {
		t.Errorf("%d distinct orders answered OK, want exactly the stock %d", len(s.owner), s.stock)
	}
	if len(twice) > 0 {
		t.Errorf("%d request ids answered with two different orders: %v", len(twice), twice)
	}
	if len(s.forgotten) > 0 {
		t.Errorf("%d retries of a request id answered OK before were not answered with its order: %v", len(s.forgotten), s.forgotten)
	}
	if deadOK > 0 {
		t.Errorf("%d orders answered OK were dead-lettered", deadOK)
	}
	if missing > 0 {
		t.Errorf("%d orders answered OK are not in tb_voucher_order for their user", missing)
	}
}

// logSettled waits until an order log is empty and the counts (stored,
// dead-lettered) have not moved for 1.5 s: the node's writer has handled
// everything, and nothing it still held came in late.
func logSettled(t *testing.T, ctx context.Context, rdb *redis.Client, log string, counts func() (int, int)) {
	t.Helper()
	var lastRows, lastDead int
	since := time.Time{}
	eventually(t, log+" drained", 30*time.Second, func() bool {
		left, err := rdb.XLen(ctx, log).Result()
		if err != nil || left > 0 {
			since = time.Time{}
			return false
		}
		rows, dead := counts()
		if since.IsZero() || rows != lastRows || dead != lastDead {
			lastRows, lastDead, since = rows, dead, time.Now()
			return false
		}
		return time.Since(since) >= 1500*time.Millisecond
	})
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("order id %q: %v", s, err)
	}
	return n
}

// A red packet must not pay out more than its total when Redis goes back
// in time with its keys present: three packets grabbed, a snapshot, three
// more grabbed and stored in Postgres, then Redis killed and started from
// the snapshot. New users grab until the red packet is empty, and the
// three later grabbers try again. Every packet must be handed out once,
// to one user, with the amount that user was answered; what the database
// holds must add up to no more than the red packet; nothing may be
// dead-lettered. Without the check of the server's run id
// (grab_red_packet.lua) the three later grabbers are handed second
// packets and three more users get packets the database already gave.
func TestRedPacketRedisRestartedFromAnOlderSnapshotPaysOutNoMore(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the service as a process")
	}
	bin, redisSrv, dbURL, env, tokens := killRig(t)
	node := startProcess(t, bin, env)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's output:\n%s", node.Output())
		}
	})
	creator, _ := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleUser}, time.Hour)
	const total, packets = 1000, 10
	id := createRedPacketOn(t, node, creator, total, packets, 120)
	db := testenv.MustOpen(t, dbURL)
	ctx := t.Context()
	client := &http.Client{Timeout: 5 * time.Second}
	answered := map[int64][]int64{} // user -> the amounts they were answered OK or ALREADY_GRABBED with
	codes := map[string]int{}
	grab := func(user int64) string {
		t.Helper()
		tok, _ := tokens.Issue(auth.Identity{UserID: user, Role: auth.RoleUser}, time.Hour)
		var code string
		var amount int64
		eventually(t, fmt.Sprintf("user %d's grab decided", user), 20*time.Second, func() bool {
			var err error
			code, amount, err = node.grabRedPacket(client, tok, id)
			if err != nil || code == "UNAVAILABLE" {
				time.Sleep(100 * time.Millisecond)
				return false
			}
			return true
		})
		codes[code]++
		if (code == "OK" || code == "ALREADY_GRABBED") && !slices.Contains(answered[user], amount) {
			answered[user] = append(answered[user], amount)
		}
		return code
	}
	stored := func() map[int64]int64 { return storedGrabs(t, db, id) }

	for u := int64(2); u <= 4; u++ {
		if code := grab(u); code != "OK" {
			t.Fatalf("user %d before the snapshot: %s", u, code)
		}
	}
	snap := t.TempDir()
	if err := redisSrv.SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	for u := int64(5); u <= 7; u++ {
		if code := grab(u); code != "OK" {
			t.Fatalf("user %d after the snapshot: %s", u, code)
		}
	}
	eventually(t, "the six grabs in Postgres", 20*time.Second, func() bool { return len(stored()) == 6 })
	if err := redisSrv.RestartFromSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	// New users first: a Redis that forgot the three later packets would
	// hand them out again; then the three later grabbers try again.
	for u, empty := int64(8), 0; empty < 3 && u <= 3*packets; u++ {
		if grab(u) == "EMPTY" {
			empty++
		} else {
			empty = 0
		}
	}
	for u := int64(5); u <= 7; u++ {
		grab(u) // again: they hold a packet already
	}
	deadLetters := func() int {
		t.Helper()
		n, err := db.NewSelect().Table("tb_order_dead_letter").Where("key LIKE ?", "{rp"+id+"}:log/%").Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr()})
	defer rdb.Close()
	logSettled(t, ctx, rdb, "{rp"+id+"}:log", func() (int, int) { return len(stored()), deadLetters() })
	in := stored()
	var paid int64
	for _, a := range in {
		paid += a
	}
	var twice []string
	var answeredTotal int64
	for u, amounts := range answered {
		if len(amounts) > 1 {
			twice = append(twice, fmt.Sprintf("user %d: %v", u, amounts))
		}
		answeredTotal += amounts[0]
		if got, ok := in[u]; !ok || got != amounts[0] {
			t.Errorf("user %d was answered %v; the database holds %d (%v)", u, amounts, got, ok)
		}
	}
	dead := deadLetters()
	t.Logf("answers %v; %d users answered with a packet (%d cents), %d grabs stored (%d cents), %d dead letters, users answered two amounts: %v",
		codes, len(answered), answeredTotal, len(in), paid, dead, twice)
	if paid > total || answeredTotal > total || len(in) > packets {
		t.Errorf("paid out %d cents (answered %d) in %d packets, of a red packet of %d cents in %d", paid, answeredTotal, len(in), total, packets)
	}
	if len(twice) > 0 {
		t.Errorf("users answered with two different packets: %v", twice)
	}
	if dead > 0 {
		t.Errorf("%d grabs dead-lettered", dead)
	}
}

// A node refuses to start on a Redis whose maxmemory-policy evicts keys,
// with an error that names the setting and its fix.
func TestNodeRefusesARedisThatEvicts(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	if err := srv.Client().ConfigSet(t.Context(), "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := serve(ctx, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "REDIS_URL": srv.URL(), "DATABASE_URL": testenv.MustPostgresURL(t),
		"JWT_SECRET": "evict-secret-0123456789abcdef0123456",
	}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "maxmemory-policy is volatile-lru") || !strings.Contains(err.Error(), "noeviction") {
		t.Fatalf("start on an evicting redis: %v; want a refusal naming maxmemory-policy", err)
	}
}

// FLUSHALL mid-sale, while orders answered OK wait in the order log that
// no writer has read (Postgres is away, so the writer holds its first
// batch and reads no further), loses those orders' only copy in Redis.
// The node keeps its own copy of every order it answered OK until a
// writer has read it (persistence.SoldShadow) and appends them to the log
// again once Redis holds a reloaded load; the reload holds its sales until
// they are back in the stock. Every promise holds: the stock sold
// exactly, each retried request id answered with its order, every OK'd
// order stored, none dead-lettered. Without the node's copy the ten are
// lost and their retries get new orders.
func TestRedisFlushedMidSaleKeepsEveryPromise(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	pgProxy := testenv.MustProxy(t, mustPostgresHost(t))
	sale := newKeyedSale(t, startOutageNode(t, srv, map[string]string{"pg-proxy": pgProxy.Addr()}), 20)
	for u := int64(1); u <= 5; u++ {
		if code := sale.buy(u); code != "OK" {
			t.Fatalf("user %d before the flush: %s", u, code)
		}
	}
	eventually(t, "the first five orders in Postgres", 20*time.Second, func() bool { return sale.count("tb_voucher_order") >= 5 })
	pgProxy.Down()
	for u := int64(6); u <= 15; u++ {
		if code := sale.buy(u); code != "OK" {
			t.Fatalf("user %d while Postgres is away: %s", u, code)
		}
	}
	if err := srv.Client().FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	pgProxy.Up()
	for u := int64(6); u <= 15; u++ {
		sale.buy(u) // a retry: the same request id
	}
	sale.sellOut(16)
	sale.check(srv)
}
