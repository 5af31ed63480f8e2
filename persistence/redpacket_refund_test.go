package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// expiredRedPacket creates a red packet of 500 cents in five packets (150,
// 35, 120, 95, 100, handed out in that order) that expires in 500 ms, on a
// database and a Redis of its own.
func expiredRedPacket(t *testing.T, id int64) (*bun.DB, *redis.Client, *persistence.RedPacketRedis, *persistence.RedPacketStore, domain.RedPacket) {
	t.Helper()
	db, rdb, r, store := redPacketStores(t)
	rp := testenv.MustRedPacket(t, store, id, []int64{150, 35, 120, 95, 100}, 500*time.Millisecond)
	return db, rdb, r, store, rp
}

// refundRecord reads a red packet's refunded cents (-1: not refunded).
func refundRecord(t *testing.T, db bun.IDB, id int64) int64 {
	t.Helper()
	var cents *int64
	if err := db.NewSelect().Table("tb_red_packet").Column("refund_cents").Where("id = ?", id).Scan(context.Background(), &cents); err != nil {
		t.Fatal(err)
	}
	if cents == nil {
		return -1
	}
	return *cents
}

// A refund that meets a writer's transaction (the red packet's row locked
// for share, a grab inserted, not yet committed) waits for it and counts
// the grab: the refund's amount is computed under the lock of its update.
// Before, it summed the grabs first, then waited in its UPDATE, and
// refunded the committed grab's cents a second time.
func TestRefundCountsAGrabCommittedWhileItWaits(t *testing.T) {
	t.Parallel()
	db, _, _, store, rp := expiredRedPacket(t, 21)
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT id FROM tb_red_packet WHERE id = ? FOR SHARE", rp.ID); err != nil { // as a writer
		t.Fatal(err)
	}
	grab := persistence.GrabRow{RedPacketID: rp.ID, Seq: 0, UserID: 1, AmountCents: 150, GrabTime: time.Now()}
	if _, err := tx.NewInsert().Model(&grab).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(rp.ExpiresAt) + 100*time.Millisecond)
	type result struct {
		done, refunded bool
		cents          int64
		err            error
	}
	out := make(chan result, 1)
	go func() {
		var r result
		r.done, r.refunded, r.cents, r.err = store.Refund(context.Background(), rp.ID, time.Now())
		out <- r
	}()
	select {
	case r := <-out:
		t.Fatalf("the refund ran beside a writer's transaction: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-out
	if r.err != nil || !r.done || !r.refunded || r.cents != 350 || refundRecord(t, db, rp.ID) != 350 {
		t.Fatalf("refund %+v, recorded %d cents; want 350 (500 less the committed grab of 150)", r, refundRecord(t, db, rp.ID))
	}
}

// A writer that commits a grab once its red packet is refunded (a writer
// frozen past every hold) is refused under the red packet's row lock: it
// waits for a refund in progress, then finds it refunded, and the grab is
// dead-lettered as red_packet_refunded, never paid beside the refund.
func TestGrabOfARefundedRedPacketIsDeadLettered(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	// A grab read by a writer, then lost by Redis (heldGrab wipes the
	// test's own server): only the writer knows it.
	rp2 := testenv.MustRedPacket(t, store, 22, []int64{40, 30}, time.Hour)
	held := heldGrab(t, rdb, r, rp2.ID)
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	// A refund in progress: the row locked for update, the refund written.
	if _, err := tx.ExecContext(ctx, "SELECT id FROM tb_red_packet WHERE id = ? FOR UPDATE", rp2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE tb_red_packet SET refund_cents = 70, refund_count = 2, refund_time = now() WHERE id = ?", rp2.ID); err != nil {
		t.Fatal(err)
	}
	w := persistence.NewRedPacketLogHandler(db, rdb, quiet, persistence.BatchOptions{Consumer: "test-writer"})
	type result struct {
		refused map[int]*domain.Refusal
		err     error
	}
	out := make(chan result, 1)
	go func() {
		refused, err := w.Handle(context.Background(), []domain.LogEntry{held})
		out <- result{refused, err}
	}()
	select {
	case r := <-out:
		t.Fatalf("the writer ran beside a refund's transaction: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	res := <-out
	if res.err != nil || len(res.refused) != 1 || res.refused[0].Reason != persistence.DeadRedPacketRefunded {
		t.Fatalf("the late grab: refused %v, %v; want it %s", res.refused, res.err, persistence.DeadRedPacketRefunded)
	}
	if err := w.DeadLetter(ctx, []domain.DeadEntry{{Entry: held, Why: res.refused[0]}}); err != nil {
		t.Fatal(err)
	}
	n, err := db.NewSelect().Model((*persistence.GrabRow)(nil)).Where("red_packet_id = ?", rp2.ID).Count(ctx)
	if err != nil || n != 0 {
		t.Fatalf("%d grabs in the database beside the refund of all 70 cents (%v)", n, err)
	}
	var reasons []string
	if err := db.NewSelect().Table("tb_order_dead_letter").Column("reason").
		Where("key LIKE ?", persistence.RedPacketLogKey(rp2.ID)+"/%").Scan(ctx, &reasons); err != nil {
		t.Fatal(err)
	}
	if len(reasons) != 1 || reasons[0] != persistence.DeadRedPacketRefunded {
		t.Fatalf("dead letters %v, want one %s", reasons, persistence.DeadRedPacketRefunded)
	}
}

// Settled says a red packet may be refunded only when no grab of it can
// still reach the database, by Redis's clock; each case sets up one thing
// that may still send a grab, and the red packet settles once it is gone.
func TestRedPacketSettlesOnlyWhenNoGrabCanArrive(t *testing.T) {
	t.Parallel()
	const hold = 300 * time.Millisecond
	redisNow := func(t *testing.T, rdb *redis.Client) int64 {
		now, err := rdb.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMilli()
	}
	for _, tc := range []struct {
		name   string
		atOnce bool
		// set makes the expired red packet unsettled for about hold.
		set func(t *testing.T, rdb *redis.Client, tag string)
	}{
		{"nothing pending: settled at once", true, func(*testing.T, *redis.Client, string) {}},
		{"a reload's hold: settled after it", false, func(t *testing.T, rdb *redis.Client, tag string) {
			if err := rdb.HSet(t.Context(), tag+":meta", "hold", redisNow(t, rdb)+hold.Milliseconds()).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"a grab in the order log: settled once it is committed", false, func(t *testing.T, rdb *redis.Client, tag string) {
			id, err := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: tag + ":log", Values: []any{"x", "1"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(hold, func() { rdb.XDel(context.Background(), tag+":log", id) })
		}},
		{"a writer holding grabs: settled once its claim lapses", false, func(t *testing.T, rdb *redis.Client, tag string) {
			err := rdb.ZAdd(t.Context(), tag+":holders", redis.Z{Score: float64(redisNow(t, rdb) + hold.Milliseconds()), Member: "w1"}).Err()
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"missing from Redis: settled a hold after it was first found missing", false, func(t *testing.T, rdb *redis.Client, tag string) {
			if err := rdb.Del(t.Context(), tag+":meta", tag+":packets", tag+":users").Err(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb, r, store := redPacketStores(t)
			// A second to live: the check before the expiry must come
			// before it on a loaded machine (200 ms once did not).
			rp := testenv.MustRedPacket(t, store, 31, []int64{40, 30}, time.Second)
			if ok, err := r.Settled(t.Context(), rp.ID, hold); err != nil || ok {
				t.Fatalf("before the expiry: settled %v, %v", ok, err)
			}
			time.Sleep(time.Until(rp.ExpiresAt) + 50*time.Millisecond)
			// Before the set-up, which reads Redis's clock for the hold's
			// end: on a loaded machine its round trips took 70 ms.
			start := time.Now()
			tc.set(t, rdb, redPacketTag(rp.ID))
			ok, err := r.Settled(t.Context(), rp.ID, hold)
			if err != nil {
				t.Fatal(err)
			}
			if tc.atOnce {
				if !ok {
					t.Fatal("not settled")
				}
				return
			}
			if ok {
				t.Fatal("settled at once")
			}
			for !ok {
				if time.Since(start) > 10*time.Second {
					t.Fatal("never settled")
				}
				time.Sleep(20 * time.Millisecond)
				if ok, err = r.Settled(t.Context(), rp.ID, hold); err != nil {
					t.Fatal(err)
				}
			}
			if waited := time.Since(start); waited < hold-50*time.Millisecond {
				t.Fatalf("settled after %v, before the %v it had to wait", waited, hold)
			}
		})
	}
}
