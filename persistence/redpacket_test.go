package persistence_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// newRedPacket creates a red packet of the given amounts directly in the
// store, expiring after ttl.
func newRedPacket(tb testing.TB, store *persistence.RedPacketStore, id int64, amounts []int64, ttl time.Duration) domain.RedPacket {
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

// redPacketStores gives a test its own database and Redis, and the red
// packets' stores on them.
func redPacketStores(tb testing.TB) (*bun.DB, *redis.Client, *persistence.RedPacketRedis, *persistence.RedPacketStore) {
	tb.Helper()
	db, rdb := testenv.MustPostgres(tb), testenv.MustRedis(tb).Client()
	r := persistence.NewRedPacketRedis(rdb)
	return db, rdb, r, persistence.NewRedPacketStore(db, r)
}

func rpCodes(b domain.RedPacketBatch) string {
	s := ""
	for _, r := range b.Results {
		s += fmt.Sprintf("%s:%d ", r.Code, r.AmountCents)
	}
	return s
}

func TestRedPacketScriptHandsOutEachPacketOncePerUser(t *testing.T) {
	t.Parallel()
	_, _, r, store := redPacketStores(t)
	newRedPacket(t, store, 1, []int64{5, 3, 2}, time.Hour)
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
	if got := rpCodes(out); got != want || out.State.Left != 0 {
		t.Fatalf("got %s left %d, want %s left 0", got, out.State.Left, want)
	}
	out, err = r.Grab(t.Context(), 99, []domain.RedPacketGrab{{RequestID: "x", UserID: 1}})
	if err != nil || rpCodes(out) != "NOT_FOUND:0 " {
		t.Fatalf("unknown red packet: %v %s", err, rpCodes(out))
	}
	if n, cents, found, err := r.Live(t.Context(), 1); err != nil || !found || n != 0 || cents != 0 {
		t.Fatalf("live: %d packets %d cents found %v err %v", n, cents, found, err)
	}
}

func TestRedPacketScriptRefusesAfterExpiry(t *testing.T) {
	t.Parallel()
	_, _, r, store := redPacketStores(t)
	newRedPacket(t, store, 2, []int64{5, 3}, 300*time.Millisecond)
	if out, err := r.Grab(t.Context(), 2, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}}); err != nil || out.Results[0].Code != domain.RedPacketOK {
		t.Fatalf("before expiry: %v %s", err, rpCodes(out))
	}
	time.Sleep(400 * time.Millisecond)
	out, err := r.Grab(t.Context(), 2, []domain.RedPacketGrab{{RequestID: "b", UserID: 2}, {RequestID: "a", UserID: 1}})
	if err != nil || rpCodes(out) != "EXPIRED:0 OK:5 " {
		t.Fatalf("after expiry: %v %s, want EXPIRED for a new user and the retry's OK", err, rpCodes(out))
	}
}

// startRedPacketWriter runs a red-packet writer until the test ends.
func startRedPacketWriter(tb testing.TB, db *bun.DB, rdb redis.UniversalClient) *persistence.RedPacketWriter {
	tb.Helper()
	w := persistence.NewRedPacketWriter(db, rdb, slog.New(slog.DiscardHandler), persistence.LogConsumerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	tb.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

func TestRedPacketGrabsReachTheDatabaseAndTheRefundHappensOnce(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	w := startRedPacketWriter(t, db, rdb)
	newRedPacket(t, store, 3, []int64{40, 30, 20, 10}, 500*time.Millisecond)
	out, err := r.Grab(t.Context(), 3, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}, {RequestID: "b", UserID: 2}})
	if err != nil || rpCodes(out) != "OK:40 OK:30 " {
		t.Fatalf("grab: %v %s", err, rpCodes(out))
	}
	// Not expired yet: nothing to refund.
	if done, _, _, err := store.Refund(t.Context(), 3, time.Now()); err != nil || done {
		t.Fatalf("refund before expiry: done %v err %v", done, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.WaitDrained(ctx); err != nil {
		t.Fatal(err)
	}
	var grabs []persistence.GrabRow
	if err := db.NewSelect().Model(&grabs).Where("red_packet_id = 3").Order("seq").Scan(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(grabs) != 2 || grabs[0].UserID != 1 || grabs[0].AmountCents != 40 || grabs[1].UserID != 2 || grabs[1].AmountCents != 30 {
		t.Fatalf("grabs in the database: %+v", grabs)
	}
	time.Sleep(600 * time.Millisecond)
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
	w := startRedPacketWriter(t, db, rdb)
	newRedPacket(t, store, 4, []int64{4, 3, 2, 1}, time.Hour)
	if _, err := r.Grab(t.Context(), 4, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.WaitDrained(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.FlushDB(t.Context()).Err(); err != nil { // the test's own redis-server
		t.Fatal(err)
	}
	if st, err := store.Load(t.Context(), 4); err != nil || !st.Found || st.Left != 3 {
		t.Fatalf("load: %+v %v", st, err)
	}
	out, err := r.Grab(t.Context(), 4, []domain.RedPacketGrab{{RequestID: "b", UserID: 1}, {RequestID: "c", UserID: 2}})
	if err != nil || rpCodes(out) != "ALREADY_GRABBED:4 OK:3 " {
		t.Fatalf("after reload: %v %s", err, rpCodes(out))
	}
	if st, err := store.Load(t.Context(), 99); err != nil || st.Found {
		t.Fatalf("load of an unknown id: %+v %v", st, err)
	}
}

// A grab the writer still held when Redis lost its data reaches the
// database after Redis was loaded again without it. The packets Redis then
// hands out twice are settled by the database: a packet it holds for
// another user stays with that user, and a packet refused because its
// grabber already has one goes back among the unclaimed ones, so no money
// vanishes (the fault suite's seed 407107706, round 7).
func TestRefusedGrabsPacketGoesBackToItsRedPacket(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	newRedPacket(t, store, 5, []int64{40, 30, 20, 10}, time.Hour)
	ctx := t.Context()
	if _, err := r.Grab(ctx, 5, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}}); err != nil {
		t.Fatal(err)
	}
	// The writer reads user 1's grab (packet 0) and cannot commit it yet.
	held, err := rdb.XRange(ctx, persistence.RedPacketLogKey(5), "-", "+").Result()
	if err != nil || len(held) != 1 {
		t.Fatalf("log: %v %v", held, err)
	}
	if err := rdb.FlushDB(ctx).Err(); err != nil { // Redis loses its data (the test's own server)
		t.Fatal(err)
	}
	if st, err := store.Load(ctx, 5); err != nil || st.Left != 4 {
		t.Fatalf("reload: %+v %v", st, err)
	}
	w := persistence.NewRedPacketWriter(db, rdb, slog.New(slog.DiscardHandler), persistence.LogConsumerOptions{})
	if _, err := w.Handle(ctx, []persistence.LogEntry{{Log: persistence.RedPacketLogKey(5), ID: held[0].ID, Values: held[0].Values}}); err != nil {
		t.Fatal(err) // now user 1's packet 0 is in the database
	}
	// Redis, loaded without it, hands packet 0 to user 2 and packet 1 to
	// user 1, who has one already.
	if out, err := r.Grab(ctx, 5, []domain.RedPacketGrab{{RequestID: "b", UserID: 2}, {RequestID: "c", UserID: 1}}); err != nil || rpCodes(out) != "OK:40 OK:30 " {
		t.Fatalf("grabs after the reload: %v %s", err, rpCodes(out))
	}
	rw := startRedPacketWriter(t, db, rdb)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := rw.WaitDrained(wctx); err != nil {
		t.Fatal(err)
	}
	var inDB []int64
	if err := db.NewSelect().Model((*persistence.GrabRow)(nil)).Column("amount_cents").Where("red_packet_id = 5").Scan(ctx, &inDB); err != nil {
		t.Fatal(err)
	}
	left, _ := rdb.LRange(ctx, "{rp5}:packets", 0, -1).Result()
	leftCents, _ := rdb.HGet(ctx, "{rp5}:meta", "left").Int64()
	if len(inDB) != 1 || len(inDB)+len(left) != 4 || leftCents != 60 {
		t.Fatalf("database %v + redis %v (%d cents left): want packet 0 in the database and the 3 others unclaimed (60 cents)", inDB, left, leftCents)
	}
}
