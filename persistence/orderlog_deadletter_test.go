package persistence_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

func TestOrderWriterDeadLettersImpossibleOrders(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := t.Context()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 3, Limit: 1})
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 2)) // two real orders, one unit left
	entry := func(values ...any) {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: persistence.LogKey(v.ID), Values: values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	// As Redis could only produce after losing its data: a second live
	// order for user 1 (limit 1), an id already used by another order, and
	// two more orders than the stock left, an order of a voucher the
	// database does not know; plus a malformed entry.
	entry(testenv.OrderEntry(9_000_001, 1, v.ID, now, 1)...)
	entry(testenv.OrderEntry(9_000_004, 60, 987_654_321, now, 1)...)
	entry(testenv.OrderEntry(sold[0], 777, v.ID, now, 1)...)
	entry(testenv.OrderEntry(9_000_002, 50, v.ID, now, 1)...)
	entry(testenv.OrderEntry(9_000_003, 51, v.ID, now, 1)...)
	entry("garbage", "yes")
	drainOrders(t, db, rdb)

	dead, _, err := persistence.NewDeadLetters(db).List(ctx, nil, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, d := range dead {
		reasons[d.Reason]++
		if d.Detail == "" || !strings.HasPrefix(d.Key, persistence.LogKey(v.ID)+"/") {
			t.Fatalf("dead letter without its reason or origin: %+v", d)
		}
	}
	want := map[string]int{
		persistence.DeadOverUserLimit: 1, persistence.DeadIDCollision: 1, persistence.DeadOverStock: 1,
		persistence.DeadUnknownVoucher: 1, persistence.DeadMalformed: 1,
	}
	if !maps.Equal(reasons, want) {
		t.Fatalf("dead letters by reason %v, want %v", reasons, want)
	}
	var rows []struct {
		ID     int64 `bun:"id"`
		UserID int64 `bun:"user_id"`
	}
	if err := db.NewSelect().Table("tb_voucher_order").Column("id", "user_id").Where("voucher_id = ?", v.ID).Order("id").Scan(ctx, &rows); err != nil {
		t.Fatal(err)
	}
	// The two real orders, untouched, and exactly one of the two orders
	// competing for the last unit.
	if len(rows) != 3 {
		t.Fatalf("orders in the database: %+v", rows)
	}
	var stock int
	if err := db.NewSelect().Table("tb_seckill_voucher").Column("stock").Where("voucher_id = ?", v.ID).Scan(ctx, &stock); err != nil || stock != 0 {
		t.Fatalf("database stock %d (%v), want 0", stock, err)
	}

	t.Run("an order under a stored order's id is dead-lettered", func(t *testing.T) {
		entry(testenv.OrderEntry(sold[1], 888, v.ID, now, 1)...)
		drainOrders(t, db, rdb)
		if n := deadLetters(t, db, v.ID); n != 5 {
			t.Fatalf("%d dead letters, want 5", n)
		}
		var user int64
		if err := db.NewSelect().Table("tb_voucher_order").Column("user_id").Where("id = ?", sold[1]).Scan(ctx, &user); err != nil || user != 2 {
			t.Fatalf("order %d now belongs to user %d (%v)", sold[1], user, err)
		}
	})
}

// Postgres guards the per-user limit for any limit, not only 1 (where the
// live-slot index does): orders Redis could only sell after losing its
// data, past a user's limit of 3, are dead-lettered with the reason; the
// ones within the limit land.
func TestDatabaseRefusesOrdersPastAUsersLimit(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := t.Context()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 20, Limit: 3})
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(7, 1)) // user 7 holds one order
	for i := range 4 {                                          // four more for user 7, limit 3
		err := rdb.XAdd(ctx, &redis.XAddArgs{
			Stream: persistence.LogKey(v.ID), Values: testenv.OrderEntry(9_100_000+i, 7, v.ID, time.Now(), 0),
		}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	drainOrders(t, db, rdb)
	testenv.AssertPersisted(t, db, v, append(sold, 9_100_000, 9_100_001))
	dead, _, err := persistence.NewDeadLetters(db).List(ctx, &v.ID, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead[0].Reason != persistence.DeadOverUserLimit || dead[1].Reason != persistence.DeadOverUserLimit {
		t.Fatalf("dead letters %+v, want two over the user's limit", dead)
	}
}
