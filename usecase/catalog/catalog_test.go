package catalog_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

// A reload of a voucher that writes Redis but cannot record its load
// stamp in the database (here: a constraint refuses every new stamp, so
// the transaction fails after the script ran) is taken back out of Redis, so that no
// stock is sold from a load the order writer cannot recognise; the next
// reload, once the database works, records its stamp.
func TestAReloadWhoseStampIsNotRecordedIsTakenBack(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := context.Background()
	cat := catalog.New(persistence.NewVouchers(db), persistence.NewStock(rdb), slog.New(slog.DiscardHandler))
	stock, limit := 10, 1
	begin, end := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	v, err := cat.Create(ctx, domain.NewVoucher{ShopID: 1, Title: "v", PayValue: 1, ActualValue: 2, Type: domain.VoucherSeckill,
		Stock: &stock, BeginAt: &begin, EndAt: &end, PerUserLimit: &limit})
	if err != nil {
		t.Fatal(err)
	}
	meta := "{v" + strconv.FormatInt(v.ID, 10) + "}:meta"
	if err := rdb.FlushAll(ctx).Err(); err != nil { // Redis loses its data (a private test server)
		t.Fatal(err)
	}
	refuse := "ALTER TABLE tb_voucher_redis_load ADD CONSTRAINT refuse_stamps CHECK (life = 'none') NOT VALID"
	if _, err := db.ExecContext(ctx, refuse); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.EnsurePreheated(ctx, v.ID); err == nil {
		t.Fatal("reload succeeded without recording its stamp")
	}
	if n, _ := rdb.Exists(ctx, meta).Result(); n != 0 {
		t.Fatal("the unrecorded load is still in Redis")
	}
	if _, err := db.ExecContext(ctx, "ALTER TABLE tb_voucher_redis_load DROP CONSTRAINT refuse_stamps"); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.EnsurePreheated(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	stamp, _ := rdb.HGet(ctx, meta, "life").Result() // the load stamp's field and column keep their stored name
	var recorded string
	if err := db.NewSelect().Table("tb_voucher_redis_load").Column("life").Where("voucher_id = ?", v.ID).Scan(ctx, &recorded); err != nil || stamp == "" || stamp != recorded {
		t.Fatalf("load stamp in redis %q, recorded %q (%v)", stamp, recorded, err)
	}
}

// A seckill voucher created while Redis does not answer is stored, and the
// admin hears UNAVAILABLE (retry later), never an internal error: the
// preheat that follows the insert is what failed.
func TestCreateWhileRedisIsDownAnswersUnavailable(t *testing.T) {
	t.Parallel()
	db, srv := testenv.MustPostgres(t), testenv.MustRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	cat := catalog.New(persistence.NewVouchers(db), persistence.NewStock(rdb), slog.New(slog.DiscardHandler))
	srv.Kill()
	stock, limit := 5, 1
	begin, end := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	_, err := cat.Create(t.Context(), domain.NewVoucher{ShopID: 1, Title: "v", PayValue: 1, ActualValue: 2,
		Type: domain.VoucherSeckill, Stock: &stock, BeginAt: &begin, EndAt: &end, PerUserLimit: &limit})
	if code := domain.ErrorCode(err); code != domain.CodeUnavailable {
		t.Fatalf("create with Redis down: %v (code %q), want %s", err, code, domain.CodeUnavailable)
	}
}

// After Redis changed (a restart, a failover, a flush), the node rebuilds
// exactly the live vouchers whose load Redis no longer holds verified: one
// whose keys are gone, one whose load was written on another server; a
// voucher whose load is verified is left alone (no row lock, no reload).
func TestPreheatStaleRebuildsOnlyWhatRedisNoLongerHoldsVerified(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := t.Context()
	gone := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10})
	older := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10})
	kept := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10})
	cat := catalog.New(persistence.NewVouchers(db), persistence.NewStock(rdb), slog.New(slog.DiscardHandler))
	if n, err := cat.PreheatStale(ctx); err != nil || n != 0 {
		t.Fatalf("every load verified: preheated %d (%v), want 0", n, err)
	}
	keys, err := rdb.Keys(ctx, fmt.Sprintf("{v%d}:*", gone.ID)).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of voucher %d: %v %v", gone.ID, keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, fmt.Sprintf("{v%d}:meta", older.ID), "run", "a-server-gone-since").Err(); err != nil {
		t.Fatal(err)
	}
	keptRun, err := rdb.HGet(ctx, fmt.Sprintf("{v%d}:meta", kept.ID), "life").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := cat.PreheatStale(ctx)
	if err != nil || n != 2 {
		t.Fatalf("preheated %d (%v), want 2: the voucher whose keys are gone and the one loaded on another server", n, err)
	}
	for _, v := range []domain.Voucher{gone, older} {
		if left, err := rdb.Get(ctx, fmt.Sprintf("{v%d}:stock", v.ID)).Int(); err != nil || left != 10 {
			t.Errorf("voucher %d after the rebuild: stock %d (%v), want 10", v.ID, left, err)
		}
	}
	if now, _ := rdb.HGet(ctx, fmt.Sprintf("{v%d}:meta", kept.ID), "life").Result(); now != keptRun {
		t.Errorf("the verified voucher %d was loaded again (stamp %q, was %q)", kept.ID, now, keptRun)
	}
	if n, err := cat.PreheatStale(ctx); err != nil || n != 0 {
		t.Fatalf("after the rebuild: preheated %d (%v), want 0", n, err)
	}
}
