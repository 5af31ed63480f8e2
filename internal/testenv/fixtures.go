package testenv

import (
	"cmp"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/internal/catalog"
	"flashsale/persistence"
)

// VoucherSpec describes a seckill voucher fixture. Zero values take a
// running sale: stock 10, one order per user, from an hour ago to an hour
// from now.
type VoucherSpec struct {
	Stock, Limit int
	Begin, End   time.Time
	// Segments: 0 takes the default (1).
	Segments int
}

// MustVoucher stores a seckill voucher in the database and preheats it
// into Redis as the service does (through catalog: from a snapshot of the
// database under the voucher's row lock, recording the load stamp), so a
// test starts from the very state a node would have. The one voucher
// builder of the tests: a second one would drift from how the service
// loads vouchers.
func MustVoucher(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, spec VoucherSpec) domain.Voucher {
	tb.Helper()
	ctx := context.Background()
	now := time.Now()
	stock, limit := cmp.Or(spec.Stock, 10), cmp.Or(spec.Limit, 1)
	begin, end := spec.Begin, spec.End
	if begin.IsZero() {
		begin = now.Add(-time.Hour)
	}
	if end.IsZero() {
		end = now.Add(time.Hour)
	}
	segs := cmp.Or(spec.Segments, 1)
	v, err := persistence.NewVouchers(db).Create(ctx, domain.NewVoucher{
		ShopID: 1, Title: "v", PayValue: 1, ActualValue: 2, Type: domain.VoucherSeckill,
		Stock: &stock, BeginAt: &begin, EndAt: &end, PerUserLimit: &limit, Segments: &segs,
	}, now)
	if err != nil {
		tb.Fatalf("create voucher: %v", err)
	}
	cat := catalog.New(persistence.NewVouchers(db), persistence.NewStock(rdb), slog.New(slog.DiscardHandler))
	if found, err := cat.EnsurePreheated(ctx, v.ID); err != nil || !found {
		tb.Fatalf("preheat voucher %d: found %v, %v", v.ID, found, err)
	}
	return v
}
