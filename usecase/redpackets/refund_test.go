package redpackets_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/redpackets"
)

// The refund job against a live red-packet writer that holds grabs it
// could not commit yet: a red packet is refunded only once no grab of it
// can still reach the database.

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
	g.writer = testenv.StartWriter(t, testenv.RedPacketLogFamily(through(g.writerProxy), g.rdb, opts), opts)
	g.rp = testenv.MustRedPacket(t, persistence.NewRedPacketStore(g.direct, g.r), 1, refundRigAmounts, ttl)
	return g
}

// grab grabs a packet for user and wants it OK with amount.
func (g *refundRig) grab(t *testing.T, user int64, amount int64) {
	t.Helper()
	out, err := g.r.Grab(t.Context(), g.rp.ID, []domain.RedPacketGrab{{RequestID: fmt.Sprint("r", user), UserID: user}})
	if err != nil || len(out.Results) != 1 || out.Results[0].Code != domain.RedPacketOK || out.Results[0].AmountCents != amount {
		t.Fatalf("grab of user %d: %v %s, want OK:%d", user, err, testenv.RedPacketCodes(out), amount)
	}
}

// holding waits until the writer has read n grabs it has not committed.
func (g *refundRig) holding(t *testing.T, n int64) {
	t.Helper()
	testenv.WaitFor(t, "the writer to hold the grab", func() bool {
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
	job := redpackets.NewRefunds(g.refunds, nil, redpackets.RefundConfig{Grace: time.Nanosecond}, testenv.QuietLogger())
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
	// Redis no longer shows a grab the writer held across its wipe: wait
	// until the writer has committed or dead-lettered every grab answered
	// OK, so that a late commit is seen.
	testenv.WaitFor(t, "the writer to handle every grab answered OK", func() bool {
		return g.writer.Persisted()+int64(len(g.deadGrabs(t))) >= int64(len(want))
	})
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
