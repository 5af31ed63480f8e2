package writer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// gated fails every attempt until it is opened: a writer that cannot
// store its batch yet (its database is slow or away) and holds it.
type gated struct {
	writer.Handler
	open  atomic.Bool
	tries atomic.Int64
}

func (g *gated) Handle(ctx context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error) {
	g.tries.Add(1)
	if !g.open.Load() {
		return nil, errors.New("not yet")
	}
	return g.Handler.Handle(ctx, batch)
}

// An order writer's lease row tells a reload whether it may hold an order
// read before the reload began: it says "clean" often while the writer is
// idle, never while a batch it read is not stored, again once it is, and
// the row is gone once the writer stopped.
func TestAWriterHoldingABatchIsNeverReportedClean(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := context.Background()
	rows := persistence.NewWriterLeases(db, persistence.OrdersFamily)
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
	opts := writer.Options{Consumer: "node-a", MaxBackoff: 100 * time.Millisecond}
	fam := testenv.OrderLogFamily(db, rdb, opts)
	g := &gated{Handler: fam.Handler}
	fam.Handler = g
	w := testenv.StartWriter(t, fam, opts) // stopping twice is harmless

	cleanAfter := func(at time.Time) bool {
		c, err := rows.CleanSince(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return !c.Before(at)
	}
	now := func() time.Time {
		n, err := rows.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	idleAt := now()
	testenv.WaitFor(t, "the idle writer to report clean", func() bool { return cleanAfter(idleAt) })

	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 5))
	testenv.WaitFor(t, "the writer to hold the batch", func() bool { return g.tries.Load() >= 2 })
	heldAt := now()
	for range 10 {
		time.Sleep(50 * time.Millisecond) // many report periods and retries
		if cleanAfter(heldAt) {
			t.Fatal("the writer reported clean while it held a batch it had not stored")
		}
	}
	g.open.Store(true)
	testenv.WaitFor(t, "the writer to report clean once the batch is stored", func() bool { return cleanAfter(heldAt) })
	testenv.AssertPersisted(t, db, v, sold)

	w.Stop()
	var n int
	if err := db.NewSelect().Table("tb_writer_lease").ColumnExpr("count(*)").Scan(ctx, &n); err != nil || n != 0 {
		t.Fatalf("%d lease rows after the writer stopped (%v), want none", n, err)
	}
}
