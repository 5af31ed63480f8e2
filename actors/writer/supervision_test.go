package writer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// crashing panics in the middle of its first two batches: the first time
// after the real handler committed the batch (a crash between the commit
// and the acknowledgement), the second time before it commits anything.
// It records when each call began and when each panic happened.
type crashing struct {
	writer.Handler

	mu      sync.Mutex
	calls   []time.Time
	panics  []time.Time
	batches [][]string // entry ids of each call
}

func (c *crashing) Handle(ctx context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error) {
	c.mu.Lock()
	c.calls = append(c.calls, time.Now())
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = e.ID
	}
	c.batches = append(c.batches, ids)
	n := len(c.calls)
	c.mu.Unlock()
	var refused map[int]*domain.Refusal
	var err error
	if n != 2 {
		refused, err = c.Handler.Handle(ctx, batch)
	}
	if n <= 2 {
		c.mu.Lock()
		c.panics = append(c.panics, time.Now())
		c.mu.Unlock()
		panic("the handler crashed")
	}
	return refused, err
}

// A persistence actor whose handler panics is restarted by its supervisor
// after a backoff that grows with each failure; the new incarnation
// re-reads the entries its predecessor left unacknowledged, so no order is
// lost, and the conflict clause makes the replay of a committed batch a
// no-op, so none is written twice.
func TestWriterRestartsAfterAFailureWithBackoffAndLosesNothing(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := t.Context()
	const orders = 50
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: orders, Limit: 1})
	at := time.Now().Add(-time.Minute)
	want := map[int64]bool{}
	for i := range orders {
		id, user := int64(1_000_000+i), int64(100+i)
		want[id] = true
		err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: persistence.LogKey(v.ID), Values: []any{
			persistence.EntryOrderID, id, persistence.EntryUserID, user, persistence.EntryVoucherID, v.ID,
			persistence.EntryTime, at.UnixMilli(), persistence.EntrySlot, 1,
		}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}

	const backoff = 300 * time.Millisecond
	opts := writer.Options{Batch: 10, Linger: -1, RestartBackoff: backoff}
	fam := testenv.OrderLogFamily(db, rdb, opts)
	h := &crashing{Handler: fam.Handler}
	fam.Handler = h
	w := testenv.StartWriter(t, fam, opts)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.WaitDrained(wctx); err != nil {
		t.Fatal(err)
	}

	t.Run("restarted once per failure", func(t *testing.T) {
		if got := w.Restarts(); got != 2 {
			t.Fatalf("%d restarts, want 2", got)
		}
	})
	t.Run("each restart waits a backoff that grows with the failures", func(t *testing.T) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.calls) < 3 || len(h.panics) != 2 {
			t.Fatalf("%d calls, %d panics", len(h.calls), len(h.panics))
		}
		for i := range 2 {
			gap := h.calls[i+1].Sub(h.panics[i])
			if gap < time.Duration(i+1)*backoff {
				t.Fatalf("restart %d handled a batch %v after the panic, want at least %v", i+1, gap, time.Duration(i+1)*backoff)
			}
		}
	})
	t.Run("the restarted actor re-reads the batch it left unacknowledged", func(t *testing.T) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for i := 1; i <= 2; i++ {
			if !slices.Equal(h.batches[i], h.batches[0]) {
				t.Fatalf("batch %d after a restart was %v, want the unacknowledged %v", i, h.batches[i], h.batches[0])
			}
		}
	})
	t.Run("every order in the database once, its stock taken once", func(t *testing.T) {
		var got []int64
		if err := db.NewSelect().Table("tb_voucher_order").Column("id").Where("voucher_id = ?", v.ID).Scan(ctx, &got); err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for _, id := range got {
			if !want[id] || seen[id] {
				t.Fatalf("order %d unexpected or twice", id)
			}
			seen[id] = true
		}
		if len(seen) != orders {
			t.Fatalf("%d of %d orders in the database", len(seen), orders)
		}
		var stock, ledger int
		if err := db.NewSelect().Table("tb_seckill_voucher").Column("stock").Where("voucher_id = ?", v.ID).Scan(ctx, &stock); err != nil {
			t.Fatal(err)
		}
		if err := db.NewSelect().Table("tb_stock_ledger").ColumnExpr("count(*)").Where("voucher_id = ? AND reason = 'sale'", v.ID).Scan(ctx, &ledger); err != nil {
			t.Fatal(err)
		}
		if stock != 0 || ledger != orders {
			t.Fatalf("stock %d, sale ledger rows %d: want 0 and %d", stock, ledger, orders)
		}
		if n := w.Persisted(); n != orders {
			t.Fatalf("the writer counted %d inserted orders, want %d", n, orders)
		}
	})
}
