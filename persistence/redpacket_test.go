package persistence_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// redPacketStores gives a test its own database and Redis, and the red
// packets' stores on them.
func redPacketStores(tb testing.TB) (*bun.DB, *redis.Client, *persistence.RedPacketRedis, *persistence.RedPacketStore) {
	tb.Helper()
	db, rdb := testenv.MustPostgres(tb), testenv.MustRedis(tb).Client()
	r := persistence.NewRedPacketRedis(rdb)
	return db, rdb, r, persistence.NewRedPacketStore(db, r)
}

func TestRedPacketScriptHandsOutEachPacketOncePerUser(t *testing.T) {
	t.Parallel()
	_, _, r, store := redPacketStores(t)
	testenv.MustRedPacket(t, store, 1, []int64{5, 3, 2}, time.Hour)
	// User 1 grabs, retries the same request (OK again, same packet), and
	// tries again with a new request (ALREADY_GRABBED with what they got).
	out, err := r.Grab(t.Context(), 1, []domain.RedPacketGrab{
		{RequestID: "a", UserID: 1}, {RequestID: "a", UserID: 1}, {RequestID: "b", UserID: 1},
		{RequestID: "c", UserID: 2}, {RequestID: "d", UserID: 3}, {RequestID: "e", UserID: 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "OK:5 OK:5 ALREADY_GRABBED:5 OK:3 OK:2 EMPTY:0 "
	if got := testenv.RedPacketCodes(out); got != want || out.State.Left != 0 {
		t.Fatalf("got %s left %d, want %s left 0", got, out.State.Left, want)
	}
	out, err = r.Grab(t.Context(), 99, []domain.RedPacketGrab{{RequestID: "x", UserID: 1}})
	if err != nil || testenv.RedPacketCodes(out) != "NOT_FOUND:0 " {
		t.Fatalf("unknown red packet: %v %s", err, testenv.RedPacketCodes(out))
	}
	if n, cents, found, err := r.Live(t.Context(), 1); err != nil || !found || n != 0 || cents != 0 {
		t.Fatalf("live: %d packets %d cents found %v err %v", n, cents, found, err)
	}
}

func TestRedPacketScriptRefusesAfterExpiry(t *testing.T) {
	t.Parallel()
	_, _, r, store := redPacketStores(t)
	// The expiry leaves room for the setup and the first grab on a busy
	// machine; the test then sleeps until it.
	rp := testenv.MustRedPacket(t, store, 2, []int64{5, 3}, 2*time.Second)
	if out, err := r.Grab(t.Context(), 2, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}}); err != nil || out.Results[0].Code != domain.RedPacketOK {
		t.Fatalf("before expiry: %v %s", err, testenv.RedPacketCodes(out))
	}
	time.Sleep(time.Until(rp.ExpiresAt) + 100*time.Millisecond)
	out, err := r.Grab(t.Context(), 2, []domain.RedPacketGrab{{RequestID: "b", UserID: 2}, {RequestID: "a", UserID: 1}})
	if err != nil || testenv.RedPacketCodes(out) != "EXPIRED:0 OK:5 " {
		t.Fatalf("after expiry: %v %s, want EXPIRED for a new user and the retry's OK", err, testenv.RedPacketCodes(out))
	}
}

func TestRedPacketGrabsReachTheDatabaseAndTheRefundHappensOnce(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	created := testenv.MustRedPacket(t, store, 3, []int64{40, 30, 20, 10}, 2*time.Second)
	out, err := r.Grab(t.Context(), 3, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}, {RequestID: "b", UserID: 2}})
	if err != nil || testenv.RedPacketCodes(out) != "OK:40 OK:30 " {
		t.Fatalf("grab: %v %s", err, testenv.RedPacketCodes(out))
	}
	// Not expired yet: nothing to refund.
	if done, _, _, err := store.Refund(t.Context(), 3, time.Now()); err != nil || done {
		t.Fatalf("refund before expiry: done %v err %v", done, err)
	}
	drainRedPackets(t, db, rdb)
	var grabs []persistence.GrabRow
	if err := db.NewSelect().Model(&grabs).Where("red_packet_id = 3").Order("seq").Scan(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(grabs) != 2 || grabs[0].UserID != 1 || grabs[0].AmountCents != 40 || grabs[1].UserID != 2 || grabs[1].AmountCents != 30 {
		t.Fatalf("grabs in the database: %+v", grabs)
	}
	time.Sleep(time.Until(created.ExpiresAt) + 100*time.Millisecond)
	var refunds []int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 { // four racing refunds: one refunds, the others find it done
		wg.Go(func() {
			done, refunded, cents, err := store.Refund(context.Background(), 3, time.Now())
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !done {
				t.Errorf("refund: done %v err %v", done, err)
			}
			if refunded {
				refunds = append(refunds, cents)
			}
		})
	}
	wg.Wait()
	if fmt.Sprint(refunds) != "[30]" {
		t.Fatalf("refunds %v, want one of 30 cents", refunds)
	}
	// A run that comes after the refund removed the Redis state (it was
	// listed before) finds it done, not missing from Redis.
	if done, refunded, _, err := store.Refund(t.Context(), 3, time.Now()); err != nil || !done || refunded {
		t.Fatalf("a later refund: done %v refunded %v err %v, want done by the first", done, refunded, err)
	}
	rp, err := store.Get(t.Context(), 3)
	if err != nil || rp.Refunded == nil || rp.RemainingCount != 2 || rp.RemainingCents != 30 {
		t.Fatalf("after refund: %+v %v", rp, err)
	}
	if _, _, found, _ := r.Live(t.Context(), 3); found {
		t.Fatal("red packet still in redis after its refund")
	}
	if due, err := store.Due(t.Context(), time.Now(), 10); err != nil || len(due) != 0 {
		t.Fatalf("due after refund: %v %v", due, err)
	}
}

func TestRedPacketLoadRestoresWhatRedisLost(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	store.ReloadHold = 300 * time.Millisecond
	testenv.MustRedPacket(t, store, 4, []int64{4, 3, 2, 1}, time.Hour)
	if _, err := r.Grab(t.Context(), 4, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}}); err != nil {
		t.Fatal(err)
	}
	drainRedPackets(t, db, rdb)
	if err := rdb.FlushDB(t.Context()).Err(); err != nil { // the test's own redis-server
		t.Fatal(err)
	}
	loaded := time.Now()
	if st, err := store.Load(t.Context(), 4); err != nil || !st.Found || st.Left != 3 {
		t.Fatalf("load: %+v %v", st, err)
	}
	// While the reload holds grabs, a user who has a packet hears so and
	// a user without one hears UNAVAILABLE; after it, they get one.
	out, err := r.Grab(t.Context(), 4, []domain.RedPacketGrab{{RequestID: "b", UserID: 1}, {RequestID: "c", UserID: 2}})
	if err != nil || (testenv.RedPacketCodes(out) != "ALREADY_GRABBED:4 UNAVAILABLE:0 " && time.Since(loaded) < 300*time.Millisecond) {
		t.Fatalf("during the hold: %v %s", err, testenv.RedPacketCodes(out))
	}
	out, err = afterHold(t, r, 4, []domain.RedPacketGrab{{RequestID: "b", UserID: 1}, {RequestID: "c", UserID: 2}})
	if err != nil || testenv.RedPacketCodes(out) != "ALREADY_GRABBED:4 OK:3 " {
		t.Fatalf("after the hold: %v %s", err, testenv.RedPacketCodes(out))
	}
	if st, err := store.Load(t.Context(), 99); err != nil || st.Found {
		t.Fatalf("load of an unknown id: %+v %v", st, err)
	}
}

// afterHold runs grabs as a client does while a reload holds them: again
// while any is answered UNAVAILABLE (nothing was granted), for up to 5 s.
func afterHold(tb testing.TB, r *persistence.RedPacketRedis, id int64, grabs []domain.RedPacketGrab) (domain.RedPacketBatch, error) {
	tb.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := r.Grab(tb.Context(), id, grabs)
		if err != nil || !strings.Contains(testenv.RedPacketCodes(out), "UNAVAILABLE") || time.Now().After(deadline) {
			return out, err
		}
	}
}

// heldGrab grabs packet 0 of red packet id for user 1 and returns its
// order-log entry, as a writer reads it before it can commit it; then
// Redis loses its data (the test's own server).
func heldGrab(tb testing.TB, rdb *redis.Client, r *persistence.RedPacketRedis, id int64) domain.LogEntry {
	tb.Helper()
	ctx := tb.Context()
	if out, err := r.Grab(ctx, id, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}}); err != nil || testenv.RedPacketCodes(out) != "OK:40 " {
		tb.Fatalf("user 1: %v %s", err, testenv.RedPacketCodes(out))
	}
	held, err := rdb.XRange(ctx, persistence.RedPacketLogKey(id), "-", "+").Result()
	if err != nil || len(held) != 1 {
		tb.Fatalf("log: %v %v", held, err)
	}
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	return domain.LogEntry{Log: persistence.RedPacketLogKey(id), ID: held[0].ID, Values: held[0].Values}
}

// redPacketSettles drains the red packet's log and checks where its money
// is: the packets in the database (amount -> user), the cents Redis still
// holds unclaimed, and the dead-lettered grabs' reasons.
func redPacketSettles(tb testing.TB, db *bun.DB, rdb *redis.Client, id int64, inDB map[int64]int64, redisCents int64, dead []string) {
	tb.Helper()
	ctx := tb.Context()
	drainRedPackets(tb, db, rdb)
	var rows []persistence.GrabRow
	if err := db.NewSelect().Model(&rows).Where("red_packet_id = ?", id).Scan(ctx); err != nil {
		tb.Fatal(err)
	}
	got := map[int64]int64{}
	for _, g := range rows {
		got[g.AmountCents] = g.UserID
	}
	left, _ := rdb.HGet(ctx, redPacketTag(id)+":meta", "left").Int64()
	var reasons []string
	err := db.NewSelect().Table("tb_order_dead_letter").Column("reason").
		Where("key LIKE ?", persistence.RedPacketLogKey(id)+"/%").Order("reason").Scan(ctx, &reasons)
	if err != nil {
		tb.Fatal(err)
	}
	if !maps.Equal(got, inDB) || left != redisCents || !slices.Equal(reasons, dead) {
		tb.Fatalf("database %v, redis %d cents unclaimed, dead letters %v; want %v, %d, %v", got, left, reasons, inDB, redisCents, dead)
	}
}

func redPacketTag(id int64) string { return fmt.Sprintf("{rp%d}", id) }

// A grab the writer still held when Redis lost its data (read from the
// log, not committed: the database was down) reaches the database after
// Redis was loaded again without it, and the reloaded red packet takes it
// back: during the reload's hold nobody else is handed its packet and its
// user no second one (the fault suite's seed 407107706, round 7, told a
// second user OK for the held grab's packet and dead-lettered them).
func TestHeldRedPacketGrabIsAdoptedByTheReload(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	testenv.MustRedPacket(t, store, 5, []int64{40, 30, 20, 10}, time.Hour)
	ctx := t.Context()
	held := heldGrab(t, rdb, r, 5)
	store.ReloadHold = 400 * time.Millisecond
	loaded := time.Now()
	if st, err := store.Load(ctx, 5); err != nil || st.Left != 4 {
		t.Fatalf("reload: %+v %v", st, err)
	}
	out, err := r.Grab(ctx, 5, []domain.RedPacketGrab{{RequestID: "b", UserID: 2}})
	if err != nil || (testenv.RedPacketCodes(out) != "UNAVAILABLE:0 " && time.Since(loaded) < 400*time.Millisecond) {
		t.Fatalf("a grab during the hold: %v %s", err, testenv.RedPacketCodes(out))
	}
	// The database is back: the writer commits the held grab.
	w := persistence.NewRedPacketLogHandler(db, rdb, quiet, persistence.BatchOptions{Consumer: "test-writer"})
	if refused, err := w.Handle(ctx, []domain.LogEntry{held}); err != nil || len(refused) != 0 {
		t.Fatalf("the held grab: refused %v, %v", refused, err)
	}
	out, err = afterHold(t, r, 5, []domain.RedPacketGrab{{RequestID: "b", UserID: 2}, {RequestID: "c", UserID: 1}})
	if err != nil || testenv.RedPacketCodes(out) != "OK:30 ALREADY_GRABBED:40 " {
		t.Fatalf("grabs after the hold: %v %s", err, testenv.RedPacketCodes(out))
	}
	redPacketSettles(t, db, rdb, 5, map[int64]int64{40: 1, 30: 2}, 30, nil)
}

// A held grab committed after the reload's hold, whose packet the reload
// already handed to another user, is dead-lettered as lost_load; the
// packet stays with the user Redis gave it to, and nothing is paid twice
// or lost: 40 cents in the database, 60 unclaimed in Redis.
func TestHeldRedPacketGrabPastTheHoldIsDeadLetteredNotPaidTwice(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	testenv.MustRedPacket(t, store, 6, []int64{40, 30, 20, 10}, time.Hour)
	ctx := t.Context()
	held := heldGrab(t, rdb, r, 6)
	store.ReloadHold = time.Nanosecond // no hold
	if st, err := store.Load(ctx, 6); err != nil || st.Left != 4 {
		t.Fatalf("reload: %+v %v", st, err)
	}
	if out, err := r.Grab(ctx, 6, []domain.RedPacketGrab{{RequestID: "b", UserID: 2}}); err != nil || testenv.RedPacketCodes(out) != "OK:40 " {
		t.Fatalf("user 2 after the reload: %v %s", err, testenv.RedPacketCodes(out))
	}
	w := persistence.NewRedPacketLogHandler(db, rdb, quiet, persistence.BatchOptions{Consumer: "test-writer"})
	refused, err := w.Handle(ctx, []domain.LogEntry{held})
	if err != nil || len(refused) != 1 || refused[0].Reason != persistence.DeadLostLoad {
		t.Fatalf("the held grab: refused %v, %v; want it lost_load", refused, err)
	}
	if err := w.DeadLetter(ctx, []domain.DeadEntry{{Entry: held, Why: refused[0]}}); err != nil {
		t.Fatal(err)
	}
	redPacketSettles(t, db, rdb, 6, map[int64]int64{40: 2}, 60, []string{persistence.DeadLostLoad})
}

// A grab the database refuses (its user holds another packet there:
// Redis lost part of what it knew) gives its packet back among the
// unclaimed ones when no grab in the database holds it, so no money
// vanishes with the refused grab.
func TestRefusedGrabsPacketGoesBackToItsRedPacket(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	testenv.MustRedPacket(t, store, 7, []int64{40, 30, 20, 10}, time.Hour)
	ctx := t.Context()
	if out, err := r.Grab(ctx, 7, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}}); err != nil || testenv.RedPacketCodes(out) != "OK:40 " {
		t.Fatalf("user 1: %v %s", err, testenv.RedPacketCodes(out))
	}
	drainRedPackets(t, db, rdb)
	if err := rdb.HDel(ctx, redPacketTag(7)+":users", "1").Err(); err != nil { // Redis forgets user 1
		t.Fatal(err)
	}
	if out, err := r.Grab(ctx, 7, []domain.RedPacketGrab{{RequestID: "c", UserID: 1}}); err != nil || testenv.RedPacketCodes(out) != "OK:30 " {
		t.Fatalf("user 1 again: %v %s", err, testenv.RedPacketCodes(out))
	}
	redPacketSettles(t, db, rdb, 7, map[int64]int64{40: 1}, 60, []string{persistence.DeadRefused})
}

// A reload reads the database and loads Redis with the red packet's row
// locked, and a writer commits and adopts its grabs holding a shared lock
// on it: a grab is either in the rows a reload reads or adopted after the
// load, never in neither. A reload waits for a writer's transaction.
func TestRedPacketReloadWaitsForAWritersCommit(t *testing.T) {
	t.Parallel()
	db, rdb, _, store := redPacketStores(t)
	testenv.MustRedPacket(t, store, 8, []int64{40, 30}, time.Hour)
	ctx := t.Context()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT id FROM tb_red_packet WHERE id = 8 FOR SHARE"); err != nil { // as a writer's adopt
		t.Fatal(err)
	}
	loaded := make(chan error, 1)
	go func() { _, err := store.Load(ctx, 8); loaded <- err }()
	select {
	case err := <-loaded:
		t.Fatalf("the reload ran beside a writer's transaction (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-loaded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reload still waits after the writer committed")
	}
}

// And a writer takes its lock before it adopts: a reload that holds the
// row (here: has read the database, without the writer's grab, and is
// loading Redis) is over before the writer looks at Redis, so the writer
// adopts its grab into what the reload loaded.
func TestRedPacketWriterAdoptsAfterAReload(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	rp := testenv.MustRedPacket(t, store, 9, []int64{40, 30}, time.Hour)
	ctx := t.Context()
	held := heldGrab(t, rdb, r, 9)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT id FROM tb_red_packet WHERE id = 9 FOR UPDATE"); err != nil { // a reload's lock
		t.Fatal(err)
	}
	w := persistence.NewRedPacketLogHandler(db, rdb, quiet, persistence.BatchOptions{Consumer: "test-writer"})
	done := make(chan error, 1)
	go func() { _, err := w.Handle(ctx, []domain.LogEntry{held}); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("the writer committed beside a reload (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The reload loads what the database had: both packets unclaimed.
	packets := []persistence.PacketRow{{RedPacketID: 9, Seq: 0, AmountCents: 40}, {RedPacketID: 9, Seq: 1, AmountCents: 30}}
	if _, err := r.Load(ctx, persistence.RedPacketLoad{ID: 9, ExpiresAt: rp.ExpiresAt, Packets: packets, Hold: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer still waits after the reload committed")
	}
	user, _ := rdb.HGet(ctx, redPacketTag(9)+":users", "1").Result()
	left, _ := rdb.LRange(ctx, redPacketTag(9)+":packets", 0, -1).Result()
	if user != "0:40:a" || !slices.Equal(left, []string{"1:30"}) {
		t.Fatalf("redis after the writer: user 1 %q, unclaimed %v; want 0:40:a and [1:30]", user, left)
	}
}
