package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

var quiet = testenv.QuietLogger()

// logStore is a family's store as the persistence actor drives it:
// persistence.OrderLogHandler, persistence.RedPacketLogHandler.
type logStore interface {
	Handle(ctx context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error)
	DeadLetter(ctx context.Context, dead []domain.DeadEntry) error
}

// drain does by hand what the persistence actor does, without its
// retries: it reads the registered logs of a family as one consumer,
// batch entries at a time, hands each batch to the store, dead-letters
// what the store refuses and acknowledges the batch, until the logs are
// empty, and fails the test if that takes longer than within. Storage
// tests drain so, to test the store alone, without the actor's pacing.
func drain(tb testing.TB, logs *persistence.Logs, store logStore, batch int, within time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		left, err := logs.Length(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if left == 0 {
			return
		}
		names, err := logs.List(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		entries, err := logs.Read(ctx, "storage-test", names, ">", batch, 0)
		if errors.Is(err, persistence.ErrStaleList) {
			continue // the read created the missing groups
		}
		if err != nil {
			tb.Fatalf("read the logs: %v", err)
		}
		if len(entries) == 0 {
			tb.Fatalf("%d entries left, none to read: they are pending with another consumer", left)
		}
		if err := handOver(ctx, logs, store, entries); err != nil {
			tb.Fatal(err)
		}
	}
}

// handOver is one step of the persistence actor, without its retries: it
// hands a batch to the store, dead-letters what the store refuses and
// acknowledges the batch.
func handOver(ctx context.Context, logs *persistence.Logs, store logStore, batch []domain.LogEntry) error {
	refused, err := store.Handle(ctx, batch)
	if err != nil {
		return fmt.Errorf("handle a batch of %d: %w", len(batch), err)
	}
	var dead []domain.DeadEntry
	for i, why := range refused {
		dead = append(dead, domain.DeadEntry{Entry: batch[i], Why: why})
	}
	if len(dead) > 0 {
		if err := store.DeadLetter(ctx, dead); err != nil {
			return fmt.Errorf("dead-letter %d entries: %w", len(dead), err)
		}
	}
	return logs.Ack(ctx, batch)
}

// writerBatch is the persistence actor's batch by default
// (writer.BatchDefault).
const writerBatch = 500

// orderStore is the order log's store on db and rdb.
func orderStore(db *bun.DB, rdb redis.UniversalClient) *persistence.OrderLogHandler {
	return persistence.NewOrderLogHandler(db, rdb, quiet, persistence.BatchOptions{})
}

// drainOrders stores every order in the order logs through the order
// log's store, in the actor's batches.
func drainOrders(tb testing.TB, db *bun.DB, rdb redis.UniversalClient) {
	tb.Helper()
	drain(tb, persistence.NewOrderLogs(rdb), orderStore(db, rdb), writerBatch, 30*time.Second)
}

// drainRedPackets stores every grab in the red packets' order logs
// through their store, in the actor's batches.
func drainRedPackets(tb testing.TB, db *bun.DB, rdb redis.UniversalClient) {
	tb.Helper()
	store := persistence.NewRedPacketLogHandler(db, rdb, quiet, persistence.BatchOptions{Consumer: "storage-test"})
	drain(tb, persistence.NewRedPacketLogs(rdb), store, writerBatch, 30*time.Second)
}

func TestOrderWriterPersistsEveryOrderOnce(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 500, Limit: 1})
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 300))
	drain(t, persistence.NewOrderLogs(rdb), orderStore(db, rdb), 64, 30*time.Second) // several batches
	testenv.AssertPersisted(t, db, v, sold)

	// As if a writer committed a batch and died before acknowledging it:
	// the very same entries come around again.
	t.Run("a replayed order-log entry is a no-op", func(t *testing.T) {
		deadBefore := deadLetters(t, db, v.ID)
		for _, o := range storedOrders(t, db, sold[:10]) {
			appendEntry(t, rdb, v.ID, o.ID, o.UserID, o.CreateTime)
		}
		drainOrders(t, db, rdb)
		testenv.AssertPersisted(t, db, v, sold)
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
		drainOrders(t, db, rdb)
		testenv.AssertPersisted(t, db, v, sold)
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

// A node's copy of an order it answered OK a second time (a retry under
// the same request id, answered from Redis's record of the first sale)
// is appended to the log again, after a reload, with the time of the
// batch that answered the retry (persistence.SoldShadow): the same grab,
// under its order id and request id, at another time. Read beside the
// first entry or after it was stored, it is the same order: nothing is
// dead-lettered, and the order keeps its first time. A later time under
// the same id and another request id stays a collision (the test
// above).
func TestACopyOfAnOrderUnderItsRequestIDIsAReplayAtAnyTime(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 50, Limit: 1})
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 20))
	entries, err := rdb.XRange(t.Context(), persistence.LogKey(v.ID), "-", "+").Result()
	if err != nil || len(entries) != len(sold) {
		t.Fatalf("%d log entries for %d sold: %v", len(entries), len(sold), err)
	}
	copyOf := func(e redis.XMessage, later time.Duration) {
		t.Helper()
		ms, err := strconv.ParseInt(e.Values[persistence.EntryTime].(string), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]any{}
		for k, x := range e.Values {
			vals[k] = x
		}
		vals[persistence.EntryTime] = ms + later.Milliseconds()
		if err := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: persistence.LogKey(v.ID), Values: vals}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Copies in the log beside their first entries (one writer's batch).
	for _, e := range entries[:10] {
		copyOf(e, 45*time.Millisecond)
	}
	drainOrders(t, db, rdb)
	first := storedOrders(t, db, sold)
	// Copies of orders stored already.
	for _, e := range entries[5:15] {
		copyOf(e, 900*time.Millisecond)
	}
	drainOrders(t, db, rdb)
	testenv.AssertPersisted(t, db, v, sold)
	if n := deadLetters(t, db, v.ID); n != 0 {
		t.Fatalf("%d copies of orders under their own request ids were dead-lettered, want 0", n)
	}
	for i, o := range storedOrders(t, db, sold) {
		if !o.CreateTime.Equal(first[i].CreateTime) {
			t.Fatalf("order %d's time moved from %s to %s", o.ID, first[i].CreateTime, o.CreateTime)
		}
	}
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

// appendEntry appends an order to a voucher's log as the grab script
// writes it (perUserLimit 1).
func appendEntry(tb testing.TB, rdb redis.UniversalClient, voucherID, orderID, userID int64, at time.Time) {
	tb.Helper()
	err := rdb.XAdd(context.Background(), &redis.XAddArgs{
		Stream: persistence.LogKey(voucherID), Values: testenv.OrderEntry(orderID, userID, voucherID, at, 1),
	}).Err()
	if err != nil {
		tb.Fatal(err)
	}
}
