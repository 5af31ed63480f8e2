package persistence_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

func reconcile(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, voucherID int64) domain.Reconciliation {
	tb.Helper()
	r, err := persistence.NewReconciliations(db, rdb).Reconcile(context.Background(), voucherID)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// The identity holds at every stage of a sale: orders only in the order
// log, orders persisted, an order the database refused (dead-lettered),
// and it does not hold once Redis and the database disagree: a unit taken
// or a user's mark changed behind the service's back.
func TestReconciliationBalancesAndCatchesDisagreement(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := context.Background()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 2})
	tag := "{v" + strconv.FormatInt(v.ID, 10) + "}"

	check := func(stage string, want domain.Reconciliation) {
		t.Helper()
		got := reconcile(t, db, rdb, v.ID)
		if got.LoadStamp == "" {
			t.Fatalf("%s: no load stamp in %+v", stage, got)
		}
		got.LoadStamp = "" // random per load
		want.VoucherID, want.Initial, want.Loaded = v.ID, 10, true
		if got != want || !got.Balanced() {
			t.Fatalf("%s: %+v, want %+v balanced", stage, got, want)
		}
	}
	check("before any sale", domain.Reconciliation{Remaining: 10})
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 4))
	check("four orders in the log", domain.Reconciliation{Remaining: 6, InFlight: 4})

	// User 9 already holds his limit in the database's guard (as after a
	// Redis loss), so the database refuses the order Redis sells him.
	if _, err := db.ExecContext(ctx, "INSERT INTO tb_voucher_user (voucher_id, user_id, live, per_user_limit) VALUES (?, 9, 2, 2)", v.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Sell(t, db, rdb, v.ID, testenv.Users(9, 1))
	drainOrders(t, db, rdb)
	testenv.AssertPersisted(t, db, v, sold)
	check("persisted, one dead-lettered", domain.Reconciliation{Remaining: 5, Live: 4, DeadLettered: 1})

	// Committed but not yet acknowledged (a writer that died in between):
	// still in the log, already in the database, counted once.
	for _, o := range storedOrders(t, db, sold[:2]) {
		appendEntry(t, rdb, v.ID, o.ID, o.UserID, o.CreateTime)
	}
	if n, _ := persistence.InFlight(ctx, rdb, v.ID); n != 2 {
		t.Fatalf("log holds %d entries, want the 2 replays", n)
	}
	check("replays of persisted orders in the log", domain.Reconciliation{Remaining: 5, Live: 4, DeadLettered: 1})

	if err := rdb.DecrBy(ctx, tag+":stock", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if r := reconcile(t, db, rdb, v.ID); r.Balanced() {
		t.Fatalf("a unit taken behind the service's back still balances: %+v", r)
	}
	if err := rdb.IncrBy(ctx, tag+":stock", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HIncrBy(ctx, tag+":users", "3", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if r := reconcile(t, db, rdb, v.ID); r.Balanced() || r.UsersOff != 1 {
		t.Fatalf("a user's mark changed behind the service's back: %+v", r)
	}
}
