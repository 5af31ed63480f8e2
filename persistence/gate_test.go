package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
)

// A voucher's grab gate is stored with it and changes only while the
// voucher is paused, in Postgres and in the embedded SQLite alike.
func TestGateChangesOnlyWhilePaused(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, db *bun.DB) {
		ctx := context.Background()
		vouchers := persistence.NewVouchers(db)
		stock, begin, end := 5, time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
		v, err := vouchers.Create(ctx, domain.NewVoucher{ShopID: 1, Title: "gated", Type: domain.VoucherSeckill,
			Stock: &stock, BeginAt: &begin, EndAt: &end, Gate: domain.Gate{RequireTicket: true, Challenge: domain.ChallengePOW}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := vouchers.Get(ctx, v.ID); got.Seckill.Gate != (domain.Gate{RequireTicket: true, Challenge: domain.ChallengePOW}) {
			t.Fatalf("stored gate %+v", got.Seckill.Gate)
		}
		open, none := false, domain.ChallengeNone
		change := domain.GateChange{RequireTicket: &open, Challenge: &none}
		if _, err := vouchers.SetGate(ctx, v.ID, change, time.Now()); domain.ErrorCode(err) != domain.CodeBadInput {
			t.Fatalf("change of a running sale: %v", err)
		}
		if _, err := vouchers.SetStatus(ctx, v.ID, domain.StatusPaused, time.Now()); err != nil {
			t.Fatal(err)
		}
		got, err := vouchers.SetGate(ctx, v.ID, change, time.Now())
		if err != nil || got.Seckill.Gate != (domain.Gate{}) {
			t.Fatalf("change while paused: %+v, %v", got.Seckill, err)
		}
		if _, err := vouchers.SetGate(ctx, v.ID+100, change, time.Now()); domain.ErrorCode(err) != domain.CodeNotFound {
			t.Fatalf("unknown voucher: %v", err)
		}
		normal, err := vouchers.Create(ctx, domain.NewVoucher{ShopID: 1, Title: "normal", Type: domain.VoucherNormal}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := vouchers.SetStatus(ctx, normal.ID, domain.StatusPaused, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := vouchers.SetGate(ctx, normal.ID, change, time.Now()); domain.ErrorCode(err) != domain.CodeBadInput {
			t.Fatalf("gate of a normal voucher: %v", err)
		}
	})
}
