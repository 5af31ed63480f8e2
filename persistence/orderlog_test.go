package persistence_test

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

var quiet = slog.New(slog.DiscardHandler)

// runWriter runs an order writer until the test ends.
func runWriter(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, opts writer.Options) *writer.Writer {
	tb.Helper()
	return testenv.StartOrderWriter(tb, db, rdb, opts)
}

func drained(tb testing.TB, w *writer.Writer, within time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := w.WaitDrained(ctx); err != nil {
		tb.Fatalf("order log not drained: %v", err)
	}
}

// sell grabs one unit for each user through the script and returns the
// order ids it answered OK.
func sell(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, voucherID int64, users []int64) []int64 {
	tb.Helper()
	sold, _ := sellCounting(tb, db, rdb, voucherID, users)
	return sold
}

// sellCounting is sell that also counts the answers by code.
func sellCounting(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, voucherID int64, users []int64) ([]int64, map[domain.SeckillCode]int) {
	tb.Helper()
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(tb, db)
	fence, _, err := g.Claim(context.Background(), voucherID, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var sold []int64
	answers := map[domain.SeckillCode]int{}
	for len(users) > 0 {
		n := min(len(users), 50)
		out, err := g.Grab(context.Background(), voucherID, 0, fence, grabs(tb, ids, users[:n]...))
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

func users(from, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(from + i)
	}
	return out
}

// assertPersisted checks that the database holds exactly the given orders
// of the voucher and that its stock reconciles.
func assertPersisted(tb testing.TB, db *bun.DB, v domain.Voucher, want []int64) {
	tb.Helper()
	ctx := context.Background()
	var got []int64
	if err := db.NewSelect().Table("tb_voucher_order").Column("id").Where("voucher_id = ?", v.ID).Order("id").Scan(ctx, &got); err != nil {
		tb.Fatal(err)
	}
	sorted := append([]int64(nil), want...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
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

func TestOrderWriterPersistsEveryOrderOnce(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 500, Limit: 1})
	w := runWriter(t, db, rdb, writer.Options{Batch: 64})
	sold := sell(t, db, rdb, v.ID, users(1, 300))
	drained(t, w, 20*time.Second)
	assertPersisted(t, db, v, sold)

	// As if a writer committed a batch and died before acknowledging it:
	// the very same entries come around again.
	t.Run("a replayed order-log entry is a no-op", func(t *testing.T) {
		deadBefore := deadLetters(t, db, v.ID)
		for _, o := range storedOrders(t, db, sold[:10]) {
			appendEntry(t, rdb, v.ID, o.ID, o.UserID, o.CreateTime)
		}
		drained(t, w, 20*time.Second)
		assertPersisted(t, db, v, sold)
		if n := deadLetters(t, db, v.ID); n != deadBefore {
			t.Fatalf("a true replay was dead-lettered: %d dead letters, want %d", n, deadBefore)
		}
	})

	// Another order under an id already stored, even for the same user and
	// voucher (as ids repeating after Redis lost its data would produce),
	// is no replay: it is dead-lettered with its reason, and the stored
	// order stays as it was.
	t.Run("another order under a stored id is dead-lettered", func(t *testing.T) {
		deadBefore := deadLetters(t, db, v.ID)
		stored := storedOrders(t, db, sold[10:11])[0]
		appendEntry(t, rdb, v.ID, stored.ID, stored.UserID, stored.CreateTime.Add(1500*time.Millisecond))
		drained(t, w, 20*time.Second)
		assertPersisted(t, db, v, sold)
		dead, _, err := persistence.NewDeadLetters(db).List(t.Context(), &v.ID, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(dead)) != deadBefore+1 {
			t.Fatalf("%d dead letters, want %d: the colliding order was taken for a replay", len(dead), deadBefore+1)
		}
		last := dead[len(dead)-1]
		if last.Reason != persistence.DeadIDCollision || last.OrderID == nil || *last.OrderID != stored.ID {
			t.Fatalf("dead letter without its reason or order: %+v", last)
		}
		if now := storedOrders(t, db, sold[10:11])[0]; !now.CreateTime.Equal(stored.CreateTime) || now.UserID != stored.UserID {
			t.Fatalf("stored order changed: %+v, was %+v", now, stored)
		}
	})
}

type storedOrder struct {
	ID         int64     `bun:"id"`
	UserID     int64     `bun:"user_id"`
	CreateTime time.Time `bun:"create_time"`
}

// storedOrders reads the given orders from tb_voucher_order, in id order.
func storedOrders(tb testing.TB, db *bun.DB, ids []int64) []storedOrder {
	tb.Helper()
	var out []storedOrder
	err := db.NewSelect().Table("tb_voucher_order").Column("id", "user_id", "create_time").
		Where("id IN (?)", bun.In(ids)).Order("id").Scan(context.Background(), &out)
	if err != nil || len(out) != len(ids) {
		tb.Fatalf("read %d orders: got %d, %v", len(ids), len(out), err)
	}
	return out
}

// entryValues are an order-log entry's fields as the grab script writes
// them, named by the constants the script is built from; extra adds more
// (a load stamp).
func entryValues(orderID, userID, voucherID any, at time.Time, slot int, extra ...any) []any {
	return append([]any{
		persistence.EntryOrderID, orderID, persistence.EntryUserID, userID, persistence.EntryVoucherID, voucherID,
		persistence.EntryTime, at.UnixMilli(), persistence.EntrySlot, slot,
	}, extra...)
}

// appendEntry appends an order to a voucher's log as the grab script
// writes it (perUserLimit 1).
func appendEntry(tb testing.TB, rdb redis.UniversalClient, voucherID, orderID, userID int64, at time.Time) {
	tb.Helper()
	err := rdb.XAdd(context.Background(), &redis.XAddArgs{
		Stream: persistence.LogKey(voucherID), Values: entryValues(orderID, userID, voucherID, at, 1),
	}).Err()
	if err != nil {
		tb.Fatal(err)
	}
}

func TestOrderWriterTakesOverADeadWritersOrders(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
	sold := sell(t, db, rdb, v.ID, users(1, 40))
	// A writer reads the entries and dies without acknowledging them.
	res, err := rdb.XReadGroup(t.Context(), &redis.XReadGroupArgs{
		Group: persistence.OrderLogGroup, Consumer: "dead-node", Streams: []string{persistence.LogKey(v.ID), ">"}, Count: 1000,
	}).Result()
	if err != nil || len(res[0].Messages) != 40 {
		t.Fatalf("dead writer read %v %v", res, err)
	}
	w := runWriter(t, db, rdb, writer.Options{ClaimIdle: 300 * time.Millisecond, ClaimEvery: 100 * time.Millisecond})
	drained(t, w, 20*time.Second)
	assertPersisted(t, db, v, sold)
}

// lostReply loses the reply of the first XREADGROUP that delivers entries
// after Redis has run it, as when Redis dies (or the connection drops)
// between writing the group's pending list to its append-only file and
// sending the reply. The caller sees an error, or, with retried set, what
// go-redis's own retry of the read (MaxRetries, on by default) returns:
// no error at all, and the lost entries never.
type lostReply struct {
	retried bool
	fired   atomic.Bool
}

func (l *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if xr, ok := cmd.(*redis.XStreamSliceCmd); ok && err == nil && len(xr.Val()) > 0 &&
			len(xr.Val()[0].Messages) > 0 && l.fired.CompareAndSwap(false, true) {
			if l.retried {
				return next(ctx, cmd)
			}
			err = errors.New("read tcp: connection reset by peer")
			cmd.SetErr(err)
		}
		return err
	}
}

func (l *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestOrderWriterRereadsALostDelivery: a read whose reply was lost has
// still moved the entries to this writer's pending list; the writer must
// read them again at once, not leave them until another writer's claim
// (ClaimIdle, 30 s by default) takes them over.
func TestOrderWriterRereadsALostDelivery(t *testing.T) {
	t.Parallel()
	for _, retried := range []bool{false, true} {
		t.Run(map[bool]string{false: "re-read when the read fails", true: "re-read when the client silently retried the read"}[retried], func(t *testing.T) {
			t.Parallel()
			db, srv := testenv.MustPostgres(t), testenv.MustRedis(t)
			rdb := srv.Client()
			v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
			wrdb := srv.Client()
			hook := &lostReply{retried: retried}
			wrdb.AddHook(hook)
			w := runWriter(t, db, wrdb, writer.Options{MaxBackoff: 100 * time.Millisecond})
			sold := sell(t, db, rdb, v.ID, users(1, 40))
			drained(t, w, 10*time.Second)
			if !hook.fired.Load() {
				t.Fatal("no delivery was lost; the test proves nothing")
			}
			assertPersisted(t, db, v, sold)
		})
	}
}

// TestOrderWriterDoesNotRecreateLostLogs: when Redis loses its data, the
// writer's list of order logs is stale until it lists them again; reading
// the lost streams meanwhile must not create them anew (empty, unregistered
// streams of vouchers Redis no longer knows, which nothing would ever
// remove). The race is the writer's: each round gives it about a second
// with a stale list, so a few rounds catch it.
func TestOrderWriterDoesNotRecreateLostLogs(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	w := runWriter(t, db, rdb, writer.Options{Block: 50 * time.Millisecond})
	for round := range 4 {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
		sell(t, db, rdb, v.ID, users(1, 3))
		drained(t, w, 10*time.Second)
		if err := rdb.FlushAll(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if keys := rdb.Keys(t.Context(), "*").Val(); len(keys) != 0 {
			t.Fatalf("round %d: keys after Redis lost its data: %v", round, keys)
		}
	}
}

// The writer stops reading the logs of sales that ended, once they are
// empty, so its work does not grow with every voucher ever sold; the log
// of a running sale, or of an ended one with orders left, stays.
func TestOrderWriterForgetsFinishedLogs(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := context.Background()
	ended := testenv.VoucherSpec{Stock: 5, Limit: 1, Begin: time.Now().Add(-time.Hour), End: time.Now().Add(-2 * time.Minute)}
	endedWithOrders := testenv.MustVoucher(t, db, rdb, ended)
	endedEmpty := testenv.MustVoucher(t, db, rdb, ended)
	live := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5, Limit: 1})
	// An order accepted just before the end, not yet persisted.
	ids := testenv.MustOrderIDs(t, db)
	oid, err := ids.Take(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	err = rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: persistence.LogKey(endedWithOrders.ID), Values: entryValues(oid[0], 7, endedWithOrders.ID, time.Now().Add(-3*time.Minute), 1),
	}).Err()
	if err != nil {
		t.Fatal(err)
	}
	registered := func(v domain.Voucher) bool {
		ok, err := rdb.SIsMember(ctx, "flashsale:order-logs", persistence.LogKey(v.ID)).Result()
		return err == nil && ok
	}
	w := runWriter(t, db, rdb, writer.Options{ClaimIdle: 150 * time.Millisecond, ClaimEvery: 50 * time.Millisecond})
	deadline := time.Now().Add(10 * time.Second)
	for registered(endedWithOrders) || registered(endedEmpty) {
		if time.Now().After(deadline) {
			t.Fatalf("finished logs still registered: %v %v", registered(endedWithOrders), registered(endedEmpty))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !registered(live) {
		t.Fatal("the log of a running sale was dropped")
	}
	drained(t, w, 5*time.Second)
	assertPersisted(t, db, endedWithOrders, oid) // persisted before its log was dropped
}
