package persistence_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/internal/redpackets"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// refundRig is a red packet of 500 cents in five packets (150, 35, 120,
// 95, 100, handed out in that order) with its own database and its own
// redis-server, which a test can kill and start again empty. The writer
// reaches the database through writerProxy and the refunds through
// refundProxy, so that each can be cut off alone or both together.
type refundRig struct {
	direct      *bun.DB // the database, for the test's own reads
	srv         *testenv.RedisServer
	rdb         *redis.Client
	r           *persistence.RedPacketRedis
	writerProxy *testenv.Proxy
	refundProxy *testenv.Proxy
	writer      *writer.Writer
	refunds     *persistence.RedPacketStore // the refund job's store, through refundProxy
	rp          domain.RedPacket
}

var refundRigAmounts = []int64{150, 35, 120, 95, 100}

// The writer retries at least every writerBackoff + writerAttempt, and a
// red packet Redis lacks is refunded only after refundHold: longer, as
// ReloadHoldDefault is longer than the writer's defaults.
const (
	writerBackoff = 500 * time.Millisecond
	writerAttempt = time.Second
	refundHold    = 2 * time.Second
)

func newRefundRig(t *testing.T, ttl time.Duration) *refundRig {
	t.Helper()
	dbURL := testenv.MustPostgresURL(t)
	g := &refundRig{direct: testenv.MustOpen(t, dbURL), srv: testenv.MustRedis(t)}
	g.rdb = g.srv.Client()
	g.r = persistence.NewRedPacketRedis(g.rdb)
	through := func(p *testenv.Proxy) *bun.DB {
		u, _ := url.Parse(dbURL)
		u.Host = p.Addr()
		return testenv.MustOpen(t, u.String())
	}
	u, _ := url.Parse(dbURL)
	g.writerProxy, g.refundProxy = testenv.MustProxy(t, u.Host), testenv.MustProxy(t, u.Host)
	g.refunds = persistence.NewRedPacketStore(through(g.refundProxy), g.r)
	g.refunds.ReloadHold = refundHold
	opts := writer.Options{MaxBackoff: writerBackoff, AttemptTimeout: writerAttempt}
	g.writer = testenv.StartWriter(t, writer.RedPackets(through(g.writerProxy), g.rdb, slog.New(slog.DiscardHandler), opts), opts)
	g.rp = newRedPacket(t, persistence.NewRedPacketStore(g.direct, g.r), 1, refundRigAmounts, ttl)
	return g
}

// grab grabs a packet for user and wants it OK with amount.
func (g *refundRig) grab(t *testing.T, user int64, amount int64) {
	t.Helper()
	out, err := g.r.Grab(t.Context(), g.rp.ID, []domain.RedPacketGrab{{RequestID: fmt.Sprint("r", user), UserID: user}})
	if err != nil || len(out.Results) != 1 || out.Results[0].Code != domain.RedPacketOK || out.Results[0].AmountCents != amount {
		t.Fatalf("grab of user %d: %v %s, want OK:%d", user, err, rpCodes(out), amount)
	}
}

// holding waits until the writer has read n grabs it has not committed.
func (g *refundRig) holding(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, "the writer to hold the grab", func() bool {
		p, err := g.rdb.XPending(context.Background(), persistence.RedPacketLogKey(g.rp.ID), persistence.RedPacketLogGroup).Result()
		return err == nil && p.Count == n
	})
}

// grabsInDB reads the red packet's grabs: user -> amount.
func (g *refundRig) grabsInDB(t *testing.T) map[int64]int64 {
	t.Helper()
	var rows []persistence.GrabRow
	if err := g.direct.NewSelect().Model(&rows).Where("red_packet_id = ?", g.rp.ID).Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := map[int64]int64{}
	for _, r := range rows {
		out[r.UserID] = r.AmountCents
	}
	return out
}

// deadGrabs reads the reasons of the red packet's dead-lettered grabs.
func (g *refundRig) deadGrabs(t *testing.T) []string {
	t.Helper()
	var reasons []string
	err := g.direct.NewSelect().Table("tb_order_dead_letter").Column("reason").
		Where("key LIKE ?", persistence.RedPacketLogKey(g.rp.ID)+"/%").Order("reason").Scan(context.Background(), &reasons)
	if err != nil {
		t.Fatal(err)
	}
	return reasons
}

// refunded reads the refund record: cents and packets, or nil.
func (g *refundRig) refunded(t *testing.T) (cents *int64, count *int) {
	t.Helper()
	var row struct {
		Cents *int64     `bun:"refund_cents"`
		Count *int       `bun:"refund_count"`
		Time  *time.Time `bun:"refund_time"`
	}
	err := g.direct.NewSelect().Table("tb_red_packet").Column("refund_cents", "refund_count", "refund_time").
		Where("id = ?", g.rp.ID).Scan(context.Background(), &row)
	if err != nil {
		t.Fatal(err)
	}
	if row.Time == nil {
		return nil, nil
	}
	return row.Cents, row.Count
}

// runRefunds runs the refund job (every 50 ms, no grace) until it refunds
// the red packet, for up to 30 s; false if it did not.
func (g *refundRig) runRefunds(ctx context.Context) bool {
	job := redpackets.NewRefunds(g.refunds, nil, redpackets.RefundConfig{Grace: time.Nanosecond}, slog.New(slog.DiscardHandler))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n, err := job.RunOnce(ctx); err == nil && n == 1 {
			return true
		}
	}
	return false
}

// conserved checks where the red packet's money ended, once everything
// settled: every grab answered OK is in the database (want: user ->
// amount), nothing was dead-lettered, and grabbed + refunded = total, in
// cents and in packets.
func (g *refundRig) conserved(t *testing.T, want map[int64]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := g.writer.WaitDrained(ctx); err != nil {
		t.Fatal(err)
	}
	// A writer that still holds a grab commits it within an attempt and a
	// pause: give it that, so that a late commit is seen.
	time.Sleep(writerBackoff + writerAttempt)
	grabs, dead := g.grabsInDB(t), g.deadGrabs(t)
	cents, count := g.refunded(t)
	if cents == nil {
		t.Fatal("not refunded")
	}
	var grabbed int64
	for _, a := range grabs {
		grabbed += a
	}
	if grabbed+*cents != g.rp.TotalCents || len(grabs)+*count != g.rp.Count {
		t.Fatalf("paid out %d cents in %d packets (grabs %v + refund %d cents, %d packets) of %d cents in %d packets",
			grabbed+*cents, len(grabs)+*count, grabs, *cents, *count, g.rp.TotalCents, g.rp.Count)
	}
	for u, a := range want {
		if grabs[u] != a {
			t.Errorf("user %d was answered OK with %d cents; the database holds %v, dead letters %v", u, a, grabs, dead)
		}
	}
	if len(dead) != 0 {
		t.Errorf("dead-lettered grabs: %v", dead)
	}
}

// The red packet expires while the writer holds a grab answered OK (the
// database refuses every connection); Redis is then killed and started
// empty, so no order log shows the held grab, and the database comes
// back. The refund job must not refund the red packet before the writer
// has had time to commit the grab: before, it refunded the total minus the
// one grab in the table, and the held grab came on top (535 cents paid
// out of 500, six packets of five).
func TestRefundWaitsForAGrabHeldAcrossARedisWipe(t *testing.T) {
	t.Parallel()
	g := newRefundRig(t, 2*time.Second)
	g.grab(t, 1, 150)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := g.writer.WaitDrained(ctx); err != nil {
		t.Fatal(err)
	}
	g.writerProxy.Down()
	g.refundProxy.Down()
	g.grab(t, 2, 35)
	g.holding(t, 1)
	time.Sleep(time.Until(g.rp.ExpiresAt) + 100*time.Millisecond)
	g.srv.Restart()
	g.refundProxy.Up()
	g.writerProxy.Up()
	if !g.runRefunds(t.Context()) {
		t.Fatal("the red packet was not refunded within 30 s")
	}
	g.conserved(t, map[int64]int64{1: 150, 2: 35})
}

// The same, but only the writer's node cannot reach the database, for
// longer than the refund's hold; the refunds reach it all along. A live
// writer that holds a grab of the red packet keeps it from being refunded
// until the grab is committed: the grab answered OK is paid, not refused.
func TestRefundWaitsForAWriterThatStillHoldsAGrab(t *testing.T) {
	t.Parallel()
	g := newRefundRig(t, 2*time.Second)
	g.grab(t, 1, 150)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := g.writer.WaitDrained(ctx); err != nil {
		t.Fatal(err)
	}
	g.writerProxy.Down()
	g.grab(t, 2, 35)
	g.holding(t, 1)
	time.Sleep(time.Until(g.rp.ExpiresAt) + 100*time.Millisecond)
	g.srv.Restart()
	done := make(chan bool, 1)
	go func() { done <- g.runRefunds(t.Context()) }()
	select {
	case <-done:
		t.Fatal("refunded while the writer still held a grab")
	case <-time.After(2*refundHold + writerBackoff + writerAttempt):
	}
	g.writerProxy.Up()
	if !<-done {
		t.Fatal("the red packet was not refunded within 30 s")
	}
	g.conserved(t, map[int64]int64{1: 150, 2: 35})
}

// expiredRedPacket creates a red packet of refundRigAmounts that expires
// in 500 ms, on a database and a Redis of its own.
func expiredRedPacket(t *testing.T, id int64) (*bun.DB, *redis.Client, *persistence.RedPacketRedis, *persistence.RedPacketStore, domain.RedPacket) {
	t.Helper()
	db, rdb, r, store := redPacketStores(t)
	rp := newRedPacket(t, store, id, refundRigAmounts, 500*time.Millisecond)
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
	rp2 := newRedPacket(t, store, 22, []int64{40, 30}, time.Hour)
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
	w := persistence.NewRedPacketWriter(db, rdb, slog.New(slog.DiscardHandler), persistence.BatchOptions{Consumer: "test-writer"})
	type result struct {
		refused map[int]*persistence.Refusal
		err     error
	}
	out := make(chan result, 1)
	go func() {
		refused, err := w.Handle(context.Background(), []persistence.LogEntry{held})
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
	if err := w.DeadLetter(ctx, []persistence.DeadEntry{{Entry: held, Why: res.refused[0]}}); err != nil {
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
			rp := newRedPacket(t, store, 31, []int64{40, 30}, 200*time.Millisecond)
			if ok, err := r.Settled(t.Context(), rp.ID, hold); err != nil || ok {
				t.Fatalf("before the expiry: settled %v, %v", ok, err)
			}
			time.Sleep(time.Until(rp.ExpiresAt) + 50*time.Millisecond)
			tc.set(t, rdb, redPacketTag(rp.ID))
			start := time.Now()
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
