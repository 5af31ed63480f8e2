package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

// heldOrders is the scene of a Redis data loss with orders in flight: a
// voucher of stock 10 sold to users 1..5 (limit orders each), those
// orders read by an order writer that cannot reach the database yet, then
// Redis restarted empty. The test decides when the writer comes back
// (write).
type heldOrders struct {
	db    *bun.DB
	rdb   *redis.Client
	v     domain.Voucher
	limit int
	first []int64           // the orders the writer holds
	batch []domain.LogEntry // the same, as the writer read them
}

const heldStock = 10

func holdOrdersAcrossRedisLoss(t *testing.T, limit int) *heldOrders {
	t.Helper()
	srv := testenv.MustRedis(t) // no persistence: a restart loses everything
	h := &heldOrders{db: testenv.MustPostgres(t), rdb: srv.Client(), limit: limit}
	h.v = testenv.MustVoucher(t, h.db, h.rdb, testenv.VoucherSpec{Stock: heldStock, Limit: limit})
	for range limit {
		h.first = append(h.first, testenv.Sell(t, h.db, h.rdb, h.v.ID, testenv.Users(1, 5))...)
	}
	var err error
	h.batch, err = persistence.NewOrderLogs(h.rdb).Read(t.Context(), "held-writer", []string{persistence.LogKey(h.v.ID)}, ">", 1000, 0)
	if err != nil || len(h.batch) != len(h.first) {
		t.Fatalf("the writer read %d of the %d orders: %v", len(h.batch), len(h.first), err)
	}
	srv.Restart()
	return h
}

// write is the writer that holds the orders reaching the database: it
// hands them to the order log's store, dead-letters what the store
// refuses and acknowledges them, as the persistence actor does with a
// batch it holds.
func (h *heldOrders) write(ctx context.Context) error {
	return handOver(ctx, persistence.NewOrderLogs(h.rdb), orderStore(h.db, h.rdb), h.batch)
}

// reload loads the voucher again from the database, as the next grab's
// actor does, with a reload hold of hold.
func (h *heldOrders) reload(t *testing.T, hold time.Duration) {
	t.Helper()
	stock := persistence.NewStock(h.rdb)
	stock.ReloadHold = hold
	if _, err := catalog.New(persistence.NewVouchers(h.db), stock, quiet).EnsurePreheated(context.Background(), h.v.ID); err != nil {
		t.Fatal(err)
	}
}

// committed checks that the held orders are in the database.
func (h *heldOrders) committed(t *testing.T) {
	t.Helper()
	var n int
	err := h.db.NewSelect().Table("tb_voucher_order").ColumnExpr("count(*)").Where("voucher_id = ?", h.v.ID).Scan(context.Background(), &n)
	if err != nil || n != len(h.first) {
		t.Fatalf("%d orders in the database (%v), want the %d held", n, err, len(h.first))
	}
}

// sellOut offers the voucher to users 1..10 up to limit times once the
// reload's hold is over: only what the held orders left may sell, and the
// database must end with exactly the OK'd orders.
func (h *heldOrders) sellOut(t *testing.T) {
	t.Helper()
	testenv.WaitFor(t, "the reload to sell", func() bool {
		st, err := persistence.NewGrabs(h.rdb).State(context.Background(), h.v.ID)
		return err == nil && !held(t, h.rdb, h.v.ID) && st.Found
	})
	var second []int64
	for range h.limit + 1 {
		second = append(second, testenv.Sell(t, h.db, h.rdb, h.v.ID, testenv.Users(1, 10))...)
	}
	if len(h.first)+len(second) != heldStock {
		t.Fatalf("%d + %d grabs answered OK for a stock of %d", len(h.first), len(second), heldStock)
	}
	drainOrders(t, h.db, h.rdb)
	testenv.AssertPersisted(t, h.db, h.v, append(h.first, second...))
	assertWithinLimit(t, h.db, h.v.ID, h.limit)
	if n := deadLetters(t, h.db, h.v.ID); n != 0 {
		t.Fatalf("%d orders dead-lettered", n)
	}
	if st, _ := persistence.NewGrabs(h.rdb).State(context.Background(), h.v.ID); st.Remaining != 0 {
		t.Fatalf("redis remaining %d after selling out", st.Remaining)
	}
}

// held reports whether the voucher's Redis load holds its sales.
func held(tb testing.TB, rdb *redis.Client, voucherID int64) bool {
	tb.Helper()
	ctx := context.Background()
	hold, err := rdb.HGet(ctx, "{v"+strconv.FormatInt(voucherID, 10)+"}:meta", "hold").Int64()
	if errors.Is(err, redis.Nil) {
		return false
	}
	now, terr := rdb.Time(ctx).Result()
	if err != nil || terr != nil {
		tb.Fatal(err, terr)
	}
	return now.UnixMilli() < hold
}

func assertWithinLimit(tb testing.TB, db *bun.DB, voucherID int64, limit int) {
	tb.Helper()
	var over []struct {
		UserID int64 `bun:"user_id"`
		N      int   `bun:"n"`
	}
	err := db.NewSelect().Table("tb_voucher_order").ColumnExpr("user_id, count(*) AS n").
		Where("voucher_id = ? AND status NOT IN (4, 6)", voucherID).Group("user_id").Having("count(*) > ?", limit).
		Scan(context.Background(), &over)
	if err != nil {
		tb.Fatal(err)
	}
	if len(over) > 0 {
		tb.Fatalf("users over the limit of %d: %+v", limit, over)
	}
}

func deadLetters(tb testing.TB, db *bun.DB, voucherID int64) int64 {
	tb.Helper()
	n, err := persistence.NewDeadLetters(db).Count(context.Background(), voucherID)
	if err != nil {
		tb.Fatal(err)
	}
	return int64(n)
}

// Redis loses its data while the order writer holds orders it has read but
// not yet committed (the database is unreachable for it). The voucher is
// reloaded from the database, which cannot count those orders, and users
// grab again BEFORE the writer commits them: the reload must sell nothing
// until they are accounted for, and then only what they left, with no user
// over the limit (once: 15 OK answers for a stock of 10, a user holding 3
// orders at limit 2).
func TestOrdersHeldAcrossARedisReloadAreNotSoldAgain(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("orders held at limit %d are not sold again", limit), func(t *testing.T) {
			t.Parallel()
			h := holdOrdersAcrossRedisLoss(t, limit)
			h.reload(t, 3*time.Second)
			if early, answers := testenv.SellCounting(t, h.db, h.rdb, h.v.ID, testenv.Users(1, 10)); len(early) > 0 {
				t.Fatalf("the reload sold %d units before the held orders were accounted for: %v", len(early), answers)
			}
			if err := h.write(t.Context()); err != nil {
				t.Fatal(err)
			}
			h.committed(t)

			// A replay of orders already committed (a writer that crashed
			// before its acknowledgement) returns nothing to Redis twice.
			for _, o := range storedOrders(t, h.db, h.first) {
				err := h.rdb.XAdd(context.Background(), &redis.XAddArgs{
					Stream: persistence.LogKey(h.v.ID), Values: testenv.OrderEntry(o.ID, o.UserID, h.v.ID, o.CreateTime, 1, persistence.EntryLoadStamp, "an-earlier-load"),
				}).Err()
				if err != nil {
					t.Fatal(err)
				}
			}
			drainOrders(t, h.db, h.rdb)
			h.sellOut(t)
		})
	}
}

// The writer comes back only after the reload's hold is over and the
// reload has sold again, to the very users of the held orders: those can
// no longer be taken back, even though stock is left. They are
// dead-lettered as sold from a lost load, and the database holds exactly
// the reload's sales: no oversell, no user over the limit.
func TestOrdersHeldPastTheReloadHoldAreDeadLetteredNotSoldTwice(t *testing.T) {
	t.Parallel()
	h := holdOrdersAcrossRedisLoss(t, 1)
	h.reload(t, 200*time.Millisecond)
	testenv.WaitFor(t, "the hold to end", func() bool { return !held(t, h.rdb, h.v.ID) })
	second := testenv.Sell(t, h.db, h.rdb, h.v.ID, testenv.Users(1, 5))
	if len(second) != 5 {
		t.Fatalf("the reload sold %d of 5", len(second))
	}
	if err := h.write(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := deadLetters(t, h.db, h.v.ID); n != int64(len(h.first)) {
		t.Fatalf("%d orders dead-lettered, want the %d held", n, len(h.first))
	}
	drainOrders(t, h.db, h.rdb)
	testenv.AssertPersisted(t, h.db, h.v, second)
	assertWithinLimit(t, h.db, h.v.ID, 1)
	list, _, err := persistence.NewDeadLetters(h.db).List(context.Background(), &h.v.ID, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range list {
		if d.Reason != persistence.DeadLostLoad || d.OrderID == nil || !slices.Contains(h.first, *d.OrderID) {
			t.Fatalf("dead letter %+v: want a held order, reason %s", d, persistence.DeadLostLoad)
		}
	}
}

// Redis lost a voucher's load but not its order log (the keys were
// evicted or removed; a load whose stamp went unrecorded is removed so):
// the reload counts the orders still in the log, their units, their users
// and their request ids, and the writer does not count them a second time.
func TestAReloadCountsTheOrdersStillInTheLog(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := context.Background()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: heldStock, Limit: 1})
	first := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 5)) // no writer yet: all in the log
	if err := rdb.Del(ctx, "{v"+strconv.FormatInt(v.ID, 10)+"}:meta", "{v"+strconv.FormatInt(v.ID, 10)+"}:stock",
		"{v"+strconv.FormatInt(v.ID, 10)+"}:users", "{v"+strconv.FormatInt(v.ID, 10)+"}:req").Err(); err != nil {
		t.Fatal(err)
	}
	stock := persistence.NewStock(rdb)
	stock.ReloadHold = time.Millisecond
	if _, err := catalog.New(persistence.NewVouchers(db), stock, quiet).EnsurePreheated(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the reload's hold to end", func() bool { return !held(t, rdb, v.ID) })
	if st, _ := persistence.NewGrabs(rdb).State(ctx, v.ID); st.Remaining != heldStock-len(first) {
		t.Fatalf("reloaded remaining %d, want %d", st.Remaining, heldStock-len(first))
	}
	second, answers := testenv.SellCounting(t, db, rdb, v.ID, testenv.Users(1, 10))
	if len(second) != heldStock-len(first) || answers[domain.SeckillLimitReached] != 5 {
		t.Fatalf("after the reload: %d sold, answers %v", len(second), answers)
	}
	drainOrders(t, db, rdb)
	testenv.AssertPersisted(t, db, v, append(first, second...))
	if n := deadLetters(t, db, v.ID); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
	if st, _ := persistence.NewGrabs(rdb).State(ctx, v.ID); st.Remaining != 0 {
		t.Fatalf("redis remaining %d after the writer, want 0 (counted twice?)", st.Remaining)
	}
}

// The same, with the worst timing: the writer reaches the voucher's row
// lock while the reload holds it (Redis written, stamp not yet committed).
// The writer must see the new stamp once it gets the lock, not what was
// committed when it started waiting.
func TestAWriterWaitingOnAReloadSeesItsStamp(t *testing.T) {
	t.Parallel()
	h := holdOrdersAcrossRedisLoss(t, 1)
	ctx := context.Background()

	loaded, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		life := domain.NewLoadStamp()
		stock := persistence.NewStock(h.rdb)
		stock.ReloadHold = 3 * time.Second
		done <- persistence.NewVouchers(h.db).Preload(ctx, h.v.ID, func(ctx context.Context, snap domain.LoadSnapshot) (string, error) {
			if _, err := stock.Preheat(ctx, snap, life); err != nil {
				return "", err
			}
			close(loaded)
			<-release // hold the row lock while the writer comes
			return life, nil
		})
	}()
	<-loaded
	written := make(chan error, 1)
	go func() { written <- h.write(ctx) }()
	testenv.WaitFor(t, "the writer to wait for the row lock", func() bool {
		var n int
		err := h.db.NewSelect().TableExpr("pg_stat_activity").ColumnExpr("count(*)").
			Where("datname = current_database() AND wait_event_type = 'Lock'").Scan(ctx, &n)
		return err == nil && n > 0
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	h.committed(t)
	h.sellOut(t)
}

// reloadEndingHolds is reload with a hold of hold that ends early once the
// order writers' lease rows allow it (catalog.Holds, run until the test
// ends).
func (h *heldOrders) reloadEndingHolds(t *testing.T, hold time.Duration) *catalog.Holds {
	t.Helper()
	stock := persistence.NewStock(h.rdb)
	stock.ReloadHold = hold
	holds := catalog.NewHolds(persistence.NewWriterLeases(h.db, persistence.OrdersFamily), stock, hold, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); holds.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := catalog.New(persistence.NewVouchers(h.db), stock, quiet)
	c.Holds = holds
	if _, err := c.EnsurePreheated(context.Background(), h.v.ID); err != nil {
		t.Fatal(err)
	}
	return holds
}

// A reload's hold lasts as long as an order writer may hold an order of
// the lost load, and no longer: while the writer that read the orders
// has not committed them (its lease row says it holds something since
// before the reload), the voucher sells nothing; once it has committed
// them and reports holding nothing, the hold ends long before its bound
// (20 s here), and the sale goes on with no order sold twice and none
// dead-lettered.
func TestAReloadHoldsOnlyWhileAWriterMayHoldAnOrderOfTheLostLoad(t *testing.T) {
	t.Parallel()
	h := holdOrdersAcrossRedisLoss(t, 1)
	ctx := context.Background()
	rows := persistence.NewWriterLeases(h.db, persistence.OrdersFamily)
	// The writer that read the orders holds them: its last clean report
	// is from before its read.
	if err := rows.Report(ctx, "held-writer", false); err != nil {
		t.Fatal(err)
	}
	// Another writer, idle, reports clean all along.
	idle := make(chan struct{})
	go func() {
		defer close(idle)
		for ctx := t.Context(); ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
			_ = rows.Report(ctx, "idle-writer", true)
		}
	}()
	t.Cleanup(func() { <-idle })
	holds := h.reloadEndingHolds(t, 20*time.Second)
	for range 10 {
		time.Sleep(50 * time.Millisecond) // many of the hold's rounds
		if !held(t, h.rdb, h.v.ID) {
			t.Fatal("the hold ended while a writer still held orders of the lost load")
		}
	}
	if n := holds.Held(); n != 1 {
		t.Fatalf("the node counts %d held vouchers (what /readyz reports), want 1", n)
	}
	if early, answers := testenv.SellCounting(t, h.db, h.rdb, h.v.ID, testenv.Users(1, 10)); len(early) > 0 {
		t.Fatalf("the reload sold %d units while a writer held orders of the lost load: %v", len(early), answers)
	}
	if err := h.write(ctx); err != nil {
		t.Fatal(err)
	}
	h.committed(t)
	if err := rows.Report(ctx, "held-writer", true); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the hold to end once no writer holds an order of the lost load", func() bool { return !held(t, h.rdb, h.v.ID) })
	testenv.WaitFor(t, "the node to count no held voucher", func() bool { return holds.Held() == 0 })
	h.sellOut(t)
}

// A writer whose lease lapsed (killed, or cut off from the database for
// longer than WriterLeaseTTL) is not waited for, and a stopped one, whose
// row is gone, neither: with only those, the hold ends at once.
func TestAReloadDoesNotWaitForALapsedOrStoppedWriter(t *testing.T) {
	t.Parallel()
	h := holdOrdersAcrossRedisLoss(t, 1)
	ctx := context.Background()
	rows := persistence.NewWriterLeases(h.db, persistence.OrdersFamily)
	for _, w := range []string{"killed-writer", "stopped-writer"} {
		if err := rows.Report(ctx, w, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.db.NewUpdate().Table("tb_writer_lease").Set("expires_at = clock_timestamp() - interval '1 second'").
		Where("consumer = 'killed-writer'").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rows.Release(ctx, "stopped-writer"); err != nil {
		t.Fatal(err)
	}
	h.reloadEndingHolds(t, 20*time.Second)
	testenv.WaitFor(t, "the hold to end with no live writer", func() bool { return !held(t, h.rdb, h.v.ID) })
}
