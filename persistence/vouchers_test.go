package persistence_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// Nodes' clocks differ. A pause made on a node whose clock runs behind the
// node that resumed the sale a moment before must still reach Redis: the
// version Redis orders metadata by is the row's update time, which every
// change must move forward.
func TestStatusChangesReachRedisWhateverTheClocks(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, db *bun.DB) {
		rdb := testenv.MustRedis(t).Client()
		ctx := context.Background()
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
		vouchers, stock := persistence.NewVouchers(db), persistence.NewStock(rdb)
		now := time.Now()
		for i, step := range []struct {
			status domain.VoucherStatus
			clock  time.Time
		}{
			{domain.StatusPaused, now.Add(time.Minute)},     // a node ahead
			{domain.StatusActive, now.Add(time.Minute)},     // the same instant
			{domain.StatusPaused, now.Add(-time.Minute)},    // a node behind
			{domain.StatusEnded, now.Add(-2 * time.Minute)}, // further behind
		} {
			prev, _ := vouchers.Get(ctx, v.ID)
			got, err := vouchers.SetStatus(ctx, v.ID, step.status, step.clock)
			if err != nil {
				t.Fatal(err)
			}
			if !got.UpdatedAt.After(prev.UpdatedAt) {
				t.Fatalf("step %d: update time %s not after %s", i, got.UpdatedAt, prev.UpdatedAt)
			}
			if err := stock.SetStatus(ctx, v.ID, step.status, got.UpdatedAt); err != nil {
				t.Fatal(err)
			}
			st, err := persistence.NewGrabs(rdb).State(ctx, v.ID)
			if err != nil || st.Status != step.status {
				t.Fatalf("step %d: redis status %d, want %d (%v)", i, st.Status, step.status, err)
			}
		}
		if _, err := vouchers.SetStatus(ctx, v.ID+1000, domain.StatusPaused, now); domain.ErrorCode(err) != domain.CodeNotFound {
			t.Fatalf("unknown voucher: %v", err)
		}
	})
}

// eachDatabase runs f, in parallel subtests, on a Postgres database and on
// an SQLite file (the embedded mode's), each of its own.
func eachDatabase(t *testing.T, f func(t *testing.T, db *bun.DB)) {
	for _, tc := range []struct {
		name string
		db   func(testing.TB) *bun.DB
	}{
		{"postgres", testenv.MustPostgres},
		{"sqlite", func(tb testing.TB) *bun.DB { return testenv.MustOpen(tb, filepath.Join(tb.TempDir(), "t.db")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f(t, tc.db(t))
		})
	}
}
