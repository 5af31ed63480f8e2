package testenv

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/usecase/catalog"
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
	cat := catalog.New(persistence.NewVouchers(db), persistence.NewStock(rdb), QuietLogger())
	if found, err := cat.EnsurePreheated(ctx, v.ID); err != nil || !found {
		tb.Fatalf("preheat voucher %d: found %v, %v", v.ID, found, err)
	}
	return v
}

// Users are n user ids, from on.
func Users(from, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(from + i)
	}
	return out
}

// Grabs are one grab for each user, each under an order id taken from ids
// and a request id of its own, as a voucher's actor sends them to the
// grab script.
func Grabs(tb testing.TB, ids *persistence.OrderIDs, users ...int64) []domain.Grab {
	tb.Helper()
	oids, err := ids.Take(context.Background(), len(users))
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]domain.Grab, len(users))
	for i, u := range users {
		out[i] = domain.Grab{RequestID: fmt.Sprintf("req-%d-%d", u, oids[i]), UserID: u, OrderID: oids[i]}
	}
	return out
}

// Sell grabs one unit of the voucher for each user through the grab
// script, in batches of 50 under a fence of its own, and returns the
// order ids answered OK: orders in the voucher's order log, for a writer
// to store.
func Sell(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, voucherID int64, users []int64) []int64 {
	tb.Helper()
	sold, _ := SellCounting(tb, db, rdb, voucherID, users)
	return sold
}

// SellCounting is Sell that also counts the answers by code.
func SellCounting(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, voucherID int64, users []int64) ([]int64, map[domain.SeckillCode]int) {
	tb.Helper()
	g, ids := persistence.NewGrabs(rdb), MustOrderIDs(tb, db)
	fence, _, err := g.Claim(context.Background(), voucherID, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var sold []int64
	answers := map[domain.SeckillCode]int{}
	for len(users) > 0 {
		n := min(len(users), 50)
		out, err := g.Grab(context.Background(), voucherID, 0, fence, Grabs(tb, ids, users[:n]...))
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range out.Results {
			answers[r.Code]++
			if r.Code == domain.SeckillOK {
				sold = append(sold, r.OrderID)
			}
		}
		users = users[n:]
	}
	return sold, answers
}

// AssertPersisted checks that the database holds exactly the given orders
// of the voucher and that its stock reconciles: the initial stock is the
// stock left plus the orders, and each order has its sale ledger row.
func AssertPersisted(tb testing.TB, db *bun.DB, v domain.Voucher, want []int64) {
	tb.Helper()
	ctx := context.Background()
	var got []int64
	if err := db.NewSelect().Table("tb_voucher_order").Column("id").Where("voucher_id = ?", v.ID).Order("id").Scan(ctx, &got); err != nil {
		tb.Fatal(err)
	}
	sorted := slices.Sorted(slices.Values(want))
	if len(got) != len(sorted) {
		tb.Fatalf("database has %d orders, want %d", len(got), len(sorted))
	}
	for i := range got {
		if got[i] != sorted[i] {
			tb.Fatalf("order %d: database %d, answered %d", i, got[i], sorted[i])
		}
	}
	var row struct {
		Initial int `bun:"initial_stock"`
		Stock   int `bun:"stock"`
	}
	if err := db.NewSelect().Table("tb_seckill_voucher").Column("initial_stock", "stock").Where("voucher_id = ?", v.ID).Scan(ctx, &row); err != nil {
		tb.Fatal(err)
	}
	var ledger int
	if err := db.NewSelect().Table("tb_stock_ledger").ColumnExpr("count(*)").Where("voucher_id = ? AND reason = 'sale'", v.ID).Scan(ctx, &ledger); err != nil {
		tb.Fatal(err)
	}
	if row.Initial != row.Stock+len(got) || ledger != len(got) {
		tb.Fatalf("initial %d != stock %d + live %d, or sale ledger rows %d", row.Initial, row.Stock, len(got), ledger)
	}
}

// OrderEntry is an order-log entry's fields as the grab script writes
// them, named by the constants the script is built from; extra adds more
// (a load stamp). Tests append it to a log to stand for what only a Redis
// that lost data, or a writer that crashed, would leave there.
func OrderEntry(orderID, userID, voucherID any, at time.Time, slot int, extra ...any) []any {
	return append([]any{
		persistence.EntryOrderID, orderID, persistence.EntryUserID, userID, persistence.EntryVoucherID, voucherID,
		persistence.EntryTime, at.UnixMilli(), persistence.EntrySlot, slot,
	}, extra...)
}

// MustRedPacket creates a red packet of the given amounts (handed out in
// that order) directly in the store, expiring after ttl.
func MustRedPacket(tb testing.TB, store *persistence.RedPacketStore, id int64, amounts []int64, ttl time.Duration) domain.RedPacket {
	tb.Helper()
	var total int64
	for _, a := range amounts {
		total += a
	}
	now := time.Now()
	rp := domain.RedPacket{ID: id, CreatorID: 7, TotalCents: total, Count: len(amounts), ExpiresAt: now.Add(ttl), CreatedAt: now}
	if err := store.Create(context.Background(), rp, amounts); err != nil {
		tb.Fatal(err)
	}
	return rp
}

// RedPacketCodes is a batch's answers as "CODE:cents " each, for a test to
// compare with what it expects in one string.
func RedPacketCodes(b domain.RedPacketBatch) string {
	s := ""
	for _, r := range b.Results {
		s += fmt.Sprintf("%s:%d ", r.Code, r.AmountCents)
	}
	return s
}
