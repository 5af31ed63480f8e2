package persistence_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

// idTaker returns a function that takes one fresh order id.
func idTaker(tb testing.TB, ids *persistence.OrderIDs) func() int64 {
	return func() int64 {
		tb.Helper()
		got, err := ids.Take(context.Background(), 1)
		if err != nil {
			tb.Fatal(err)
		}
		return got[0]
	}
}

// redisDown is the breaker's word that Redis is down (the open breaker
// itself is tested in internal/breaker).
type redisDown struct{}

func (redisDown) Down() bool { return true }

// TestDatabaseGrabsNeverOversellOrPassALimit runs the database fallback's
// grabs against real Postgres: concurrent grabs sell exactly the stock, a
// user never passes the limit, a retried request gets its first order, and
// nothing is sold while Redis's view and the database disagree (orders on
// their way from the order log).
func TestDatabaseGrabsNeverOversellOrPassALimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MustPostgres(t)
	rdb := testenv.MustRedis(t).Client()
	take := idTaker(t, testenv.MustOrderIDs(t, db))
	fb := persistence.NewDBGrabs(db, redisDown{}, 64)
	// seenNow is a view of Redis read just now, as an actor's last call.
	seenNow := func(remaining int) domain.RedisView {
		return domain.RedisView{Remaining: remaining, SeenAt: time.Now()}
	}
	grab := func(v domain.Voucher, expected int, user int64, req string) (domain.GrabResult, bool) {
		t.Helper()
		res, sold, err := fb.Grab(ctx, v.ID, seenNow(expected), domain.Grab{RequestID: req, UserID: user, OrderID: take()})
		if err != nil {
			t.Fatal(err)
		}
		return res, sold
	}
	stockOf := func(v domain.Voucher) int {
		var n int
		if err := db.NewSelect().Table("tb_seckill_voucher").Column("stock").Where("voucher_id = ?", v.ID).Scan(ctx, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("concurrent grabs sell the stock exactly, one per user", func(t *testing.T) {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10})
		// Each grab passes the stock it expects, as an actor does: the
		// stock read just before. Concurrent grabs of one voucher run
		// serially in a node; here they race, and the row lock decides.
		var mu sync.Mutex
		sold := 0
		var wg sync.WaitGroup
		for u := int64(1); u <= 40; u++ {
			wg.Go(func() {
				for attempt := 0; attempt < 50; attempt++ {
					res, s, err := fb.Grab(ctx, v.ID, seenNow(stockOf(v)), domain.Grab{RequestID: "r" + string(rune('a'+u)), UserID: u % 20, OrderID: take()})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Code != domain.SeckillUnavailable {
						if s {
							mu.Lock()
							sold++
							mu.Unlock()
						}
						return
					}
				}
			})
		}
		wg.Wait()
		var orders, users int
		if err := db.NewSelect().Table("tb_voucher_order").ColumnExpr("COUNT(*), COUNT(DISTINCT user_id)").Where("voucher_id = ?", v.ID).Scan(ctx, &orders, &users); err != nil {
			t.Fatal(err)
		}
		if sold != 10 || orders != 10 || users != 10 || stockOf(v) != 0 {
			t.Fatalf("sold %d, %d orders of %d users, stock %d; want 10, 10, 10, 0", sold, orders, users, stockOf(v))
		}
	})

	t.Run("a user at the limit hears LIMIT_REACHED; a retried request gets its first order", func(t *testing.T) {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5})
		first, sold := grab(v, 5, 7, "u7:k1")
		if first.Code != domain.SeckillOK || !sold {
			t.Fatalf("first grab: %+v sold=%v", first, sold)
		}
		if again, sold := grab(v, 4, 7, "u7:k1"); again.Code != domain.SeckillOK || again.OrderID != first.OrderID || sold {
			t.Fatalf("retry: %+v sold=%v, want OK with order %d and no sale", again, sold, first.OrderID)
		}
		if res, _ := grab(v, 4, 7, "u7:k2"); res.Code != domain.SeckillLimitReached {
			t.Fatalf("second request of the user: %s, want LIMIT_REACHED", res.Code)
		}
		if stockOf(v) != 4 {
			t.Fatalf("stock %d, want 4", stockOf(v))
		}
	})

	t.Run("nothing is sold while orders are on their way from the order log", func(t *testing.T) {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5})
		// Redis said 3 are left; the database still shows 5: two orders
		// Redis sold are not persisted yet.
		if res, sold := grab(v, 3, 1, "a"); res.Code != domain.SeckillUnavailable || sold {
			t.Fatalf("grab with orders in flight: %s sold=%v, want UNAVAILABLE", res.Code, sold)
		}
		if stockOf(v) != 5 {
			t.Fatalf("stock %d, want 5 untouched", stockOf(v))
		}
	})

	t.Run("sold out at zero", func(t *testing.T) {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 1})
		if res, _ := grab(v, 1, 1, "a"); res.Code != domain.SeckillOK {
			t.Fatalf("%s", res.Code)
		}
		if res, _ := grab(v, 0, 2, "b"); res.Code != domain.SeckillSoldOut {
			t.Fatalf("%s, want SOLD_OUT", res.Code)
		}
	})

	t.Run("the sale marks the redis load stale, and a preheat replaces it", func(t *testing.T) {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 4})
		if res, _ := grab(v, 4, 1, "a"); res.Code != domain.SeckillOK {
			t.Fatalf("%s", res.Code)
		}
		sold, err := persistence.NewVouchers(db).DBSoldVouchers(ctx)
		if err != nil || !slices.Contains(sold, v.ID) {
			t.Fatalf("DBSoldVouchers = %v, %v; want it to hold %d", sold, err, v.ID)
		}
		if got, _ := rdb.Get(ctx, "{v"+strconv.FormatInt(v.ID, 10)+"}:stock").Int(); got != 4 {
			t.Fatalf("redis stock %d before the re-sync, want the stale 4", got)
		}
		cat := catalog.New(persistence.NewVouchers(db), persistence.NewStock(rdb), slog.New(slog.DiscardHandler))
		if err := cat.ResyncDBSold(ctx); err != nil {
			t.Fatal(err)
		}
		if got, _ := rdb.Get(ctx, "{v"+strconv.FormatInt(v.ID, 10)+"}:stock").Int(); got != 3 {
			t.Fatalf("redis stock %d after the re-sync, want 3", got)
		}
		if got, _ := rdb.HGet(ctx, "{v"+strconv.FormatInt(v.ID, 10)+"}:users", "1").Int(); got != 1 {
			t.Fatalf("user 1's mark %d after the re-sync, want 1", got)
		}
		sold, _ = persistence.NewVouchers(db).DBSoldVouchers(ctx)
		if slices.Contains(sold, v.ID) {
			t.Fatal("voucher still marked after the re-sync")
		}
	})

	t.Run("over the concurrency bound a grab is UNAVAILABLE at once", func(t *testing.T) {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5})
		one := persistence.NewDBGrabs(db, redisDown{}, 1)
		// A transaction of the test holds the voucher's row, so the first
		// grab waits inside the bound.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SELECT 1 FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE", v.ID); err != nil {
			t.Fatal(err)
		}
		first := make(chan domain.SeckillCode, 1)
		go func() {
			res, _, err := one.Grab(ctx, v.ID, seenNow(5), domain.Grab{RequestID: "held", UserID: 1, OrderID: take()})
			if err != nil {
				t.Error(err)
			}
			first <- res.Code
		}()
		testenv.WaitFor(t, "the first grab waiting for the row", func() bool {
			var n int
			_ = db.NewRaw("SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(ctx, &n)
			return n > 0
		})
		began := time.Now()
		res, sold, err := one.Grab(ctx, v.ID, seenNow(5), domain.Grab{RequestID: "second", UserID: 2, OrderID: take()})
		if err != nil || res.Code != domain.SeckillUnavailable || sold {
			t.Errorf("second grab over the bound: %s sold=%v %v, want UNAVAILABLE", res.Code, sold, err)
		}
		if took := time.Since(began); took > 100*time.Millisecond {
			t.Errorf("second grab over the bound took %v", took)
		}
		_ = tx.Rollback()
		if code := <-first; code != domain.SeckillOK {
			t.Errorf("first grab: %s, want OK", code)
		}
	})
}

// TestDatabaseGrabsWaitForOtherNodes: the fallback sells only from a view
// of Redis read after every other node stopped taking order ids, since
// the orders another node sold later may sit unread in the order log.
func TestDatabaseGrabsWaitForOtherNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MustPostgres(t)
	rdb := testenv.MustRedis(t).Client()
	ids := testenv.MustOrderIDs(t, db)
	fb := persistence.NewDBGrabs(db, redisDown{}, 4)
	seenNow := func(remaining int) domain.RedisView {
		return domain.RedisView{Remaining: remaining, SeenAt: time.Now()}
	}
	grabSeen := func(v domain.Voucher, view domain.RedisView, user int64, req string) (domain.GrabResult, bool) {
		t.Helper()
		id, err := ids.Take(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		res, sold, err := fb.Grab(ctx, v.ID, view, domain.Grab{RequestID: req, UserID: user, OrderID: id[0]})
		if err != nil {
			t.Fatal(err)
		}
		return res, sold
	}
	stockOf := func(v domain.Voucher) int {
		var n int
		if err := db.NewSelect().Table("tb_seckill_voucher").Column("stock").Where("voucher_id = ?", v.ID).Scan(ctx, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5})
	// A second node holds an order-id slot: it may sell from Redis at
	// any moment, after this node's last read, and its orders may sit
	// in the order log that nobody can read while Redis is down.
	other := testenv.MustOrderIDs(t, db)
	if _, err := other.Take(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if res, sold := grabSeen(v, seenNow(5), 1, "a"); res.Code != domain.SeckillUnavailable || sold {
		t.Fatalf("grab while another node is live: %s sold=%v, want UNAVAILABLE", res.Code, sold)
	}
	// It stopped: its last second is recorded. A read of Redis taken
	// about when it stopped may have missed its last sales...
	_ = other.Release(context.Background())
	if res, sold := grabSeen(v, seenNow(5), 1, "b"); res.Code != domain.SeckillUnavailable || sold {
		t.Fatalf("grab with a view read as the other node stopped: %s sold=%v, want UNAVAILABLE", res.Code, sold)
	}
	// ...and so may one read a moment later: the other node answers OK
	// up to a grab deadline after its last id, and clocks differ.
	soon := domain.RedisView{Remaining: 5, SeenAt: time.Now().Add(2 * time.Second)}
	if res, sold := grabSeen(v, soon, 1, "b2"); res.Code != domain.SeckillUnavailable || sold {
		t.Fatalf("grab with a view read within the slack after the other node stopped: %s sold=%v, want UNAVAILABLE", res.Code, sold)
	}
	// A read well after it cannot have.
	later := domain.RedisView{Remaining: 5, SeenAt: time.Now().Add(5 * time.Second)}
	if res, sold := grabSeen(v, later, 1, "c"); res.Code != domain.SeckillOK || !sold {
		t.Fatalf("grab with a view read after the other node stopped: %s sold=%v, want OK", res.Code, sold)
	}
	if stockOf(v) != 4 {
		t.Fatalf("stock %d, want 4", stockOf(v))
	}
}

// TestAResyncKeepsWhatTheDatabaseDecided: Redis sold request k to user 1
// as order y, still in the order log, while the database fallback, not
// knowing it, sold k as order x. The re-sync after the outage must answer
// k with x, the database's decision (the database refuses y as a
// duplicate request), count user 1 once, and keep y's unit off the stock
// (a dead-lettered order keeps it).
func TestAResyncKeepsWhatTheDatabaseDecided(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	take := idTaker(t, testenv.MustOrderIDs(t, db))
	const stock = 5
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: stock, Limit: 1})
	g := persistence.NewGrabs(rdb)
	grab := func(req string, user int64) domain.GrabResult {
		t.Helper()
		fence, _, err := g.Claim(ctx, v.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		out, err := g.Grab(ctx, v.ID, 0, fence, []domain.Grab{{RequestID: req, UserID: user, OrderID: take()}})
		if err != nil || len(out.Results) != 1 {
			t.Fatalf("grab: %+v, %v", out, err)
		}
		return out.Results[0]
	}
	y := grab("k", 1)
	if y.Code != domain.SeckillOK {
		t.Fatalf("redis sale: %s", y.Code)
	}
	fb := persistence.NewDBGrabs(db, redisDown{}, 1)
	x, sold, err := fb.Grab(ctx, v.ID, domain.RedisView{Remaining: stock, SeenAt: time.Now()},
		domain.Grab{RequestID: "k", UserID: 1, OrderID: take()})
	if err != nil || !sold || x.Code != domain.SeckillOK {
		t.Fatalf("database sale: %+v sold %v, %v", x, sold, err)
	}
	if err := catalog.New(persistence.NewVouchers(db), persistence.NewStock(rdb), quiet).ResyncDBSold(ctx); err != nil {
		t.Fatal(err)
	}
	if res := grab("k", 1); res.Code != domain.SeckillOK || res.OrderID != x.OrderID {
		t.Errorf("request k after the re-sync: %s order %d; want OK order %d (the database's), not %d", res.Code, res.OrderID, x.OrderID, y.OrderID)
	}
	if users, err := rdb.HGet(ctx, "{v"+strconv.FormatInt(v.ID, 10)+"}:users", "1").Int(); err != nil || users != 1 {
		t.Errorf("user 1 counted %d times in redis (%v), want 1", users, err)
	}
	if st, err := g.State(ctx, v.ID); err != nil || st.Remaining != stock-2 {
		t.Errorf("remaining %d after the re-sync (%v), want %d: one unit sold by each store", st.Remaining, err, stock-2)
	}
}
