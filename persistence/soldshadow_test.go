package persistence_test

import (
	"context"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

// Orders answered OK wait in the order log, read by no writer, when Redis
// is flushed: the selling node's copy (SoldShadow) is their only one. The
// reload of the voucher holds its sales until that copy is back in the
// log and a writer has returned it to the stock, however long that takes
// (no writer runs at first), then sells exactly what is left: the five
// buyers hear LIMIT_REACHED, five new ones get the five units left, the
// database ends with exactly ten orders and no dead letter.
func TestAReloadHoldsUntilTheNodesCopyOfLostOrdersIsBackInTheStock(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	db, rdb := testenv.MustPostgres(t), srv.Client()
	ctx := context.Background()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: heldStock, Limit: 1})
	shadow := persistence.NewSoldShadow(rdb, db, "node-a", quiet)
	g := persistence.NewGrabs(rdb)
	g.Shadow = shadow
	fence, _, err := g.Claim(ctx, v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := g.Grab(ctx, v.ID, 0, fence, testenv.Grabs(t, testenv.MustOrderIDs(t, db), testenv.Users(1, 5)...))
	if err != nil {
		t.Fatal(err)
	}
	var first []int64
	for _, r := range out.Results {
		if r.Code != domain.SeckillOK {
			t.Fatalf("a grab before the flush: %s", r.Code)
		}
		first = append(first, r.OrderID)
	}
	if n := shadow.Orders(); n != 5 {
		t.Fatalf("the node keeps %d orders, want the 5 it answered OK", n)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); shadow.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	time.Sleep(3 * persistence.ShadowEvery) // its row says it holds orders

	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	stock := persistence.NewStock(rdb)
	stock.ReloadHold = 20 * time.Second
	holds := catalog.NewHolds(persistence.HoldRows(db), stock, stock.ReloadHold, quiet)
	hctx, hstop := context.WithCancel(ctx)
	hdone := make(chan struct{})
	go func() { defer close(hdone); holds.Run(hctx) }()
	t.Cleanup(func() { hstop(); <-hdone })
	c := catalog.New(persistence.NewVouchers(db), stock, quiet)
	c.Holds = holds
	if _, err := c.EnsurePreheated(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the node's copy appended to the log again", func() bool {
		n, err := rdb.XLen(ctx, persistence.LogKey(v.ID)).Result()
		return err == nil && n == 5
	})
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		if !held(t, rdb, v.ID) {
			t.Fatal("the hold ended while the only copy of five OK'd orders was not back in the stock")
		}
	}
	drainOrders(t, db, rdb) // a writer reads them at last and returns them to the stock
	testenv.WaitFor(t, "the hold to end once the copy is back in the stock", func() bool { return !held(t, rdb, v.ID) })
	second, answers := testenv.SellCounting(t, db, rdb, v.ID, testenv.Users(1, 10))
	if len(second) != heldStock-5 || answers[domain.SeckillLimitReached] != 5 {
		t.Fatalf("after the reload: %d sold, answers %v; want 5 sold and the 5 first buyers at their limit", len(second), answers)
	}
	drainOrders(t, db, rdb)
	testenv.AssertPersisted(t, db, v, append(first, second...))
	if n := deadLetters(t, db, v.ID); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}
