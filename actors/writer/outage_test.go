package writer_test

import (
	"context"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// viaProxy opens the test's own database twice: directly, and through a
// proxy the test can take down or black-hole.
func viaProxy(tb testing.TB) (direct, proxied *bun.DB, proxy *testenv.Proxy) {
	tb.Helper()
	dbURL := testenv.MustPostgresURL(tb)
	direct = testenv.MustOpen(tb, dbURL)
	u, _ := url.Parse(dbURL)
	proxy = testenv.MustProxy(tb, u.Host)
	u.Host = proxy.Addr()
	return direct, testenv.MustOpen(tb, u.String()), proxy
}

// failing counts the attempts of a family's handler that failed: a
// writer that met an outage a few times has been shown it.
type failing struct {
	writer.Handler
	failed atomic.Int64
}

func (f *failing) Handle(ctx context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error) {
	refused, err := f.Handler.Handle(ctx, batch)
	if err != nil {
		f.failed.Add(1)
	}
	return refused, err
}

// startFailingOrderWriter runs an order writer on db whose failed
// attempts the returned handler counts, until the test ends.
func startFailingOrderWriter(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, opts writer.Options) (*writer.Writer, *failing) {
	tb.Helper()
	fam := testenv.OrderLogFamily(db, rdb, opts)
	h := &failing{Handler: fam.Handler}
	fam.Handler = h
	return testenv.StartWriter(tb, fam, opts), h
}

func TestOrderWriterWaitsOutAPostgresOutage(t *testing.T) {
	t.Parallel()
	direct, proxied, proxy := viaProxy(t)
	rdb := testenv.MustRedis(t).Client()

	v := testenv.MustVoucher(t, direct, rdb, testenv.VoucherSpec{Stock: 1000, Limit: 1})
	w, h := startFailingOrderWriter(t, proxied, rdb, writer.Options{Batch: 50, MaxBackoff: 200 * time.Millisecond})
	before := testenv.Sell(t, direct, rdb, v.ID, testenv.Users(1, 100))
	testenv.Drained(t, w, 20*time.Second)

	proxy.Down()
	during := testenv.Sell(t, direct, rdb, v.ID, testenv.Users(1000, 300)) // grabs go on
	failed := h.failed.Load()
	testenv.WaitFor(t, "the writer to meet the outage three times", func() bool { return h.failed.Load() >= failed+3 })
	if n, _ := persistence.InFlight(t.Context(), rdb, v.ID); n != int64(len(during)) {
		t.Fatalf("%d orders in flight during the outage, want %d", n, len(during))
	}
	proxy.Up()
	testenv.Drained(t, w, 30*time.Second)
	testenv.AssertPersisted(t, direct, v, append(before, during...))
}

// A Postgres that stops answering without closing its connections (a
// network path that silently drops them) must not hang the writer: each
// attempt gives up at its own deadline (AttemptTimeout), and once new
// connections work again everything is persisted, once. Without the
// per-attempt deadline the writer waits on a dead connection for ever and
// the log never drains.
func TestOrderWriterSurvivesAPostgresThatStopsAnswering(t *testing.T) {
	t.Parallel()
	direct, proxied, proxy := viaProxy(t)
	rdb := testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, direct, rdb, testenv.VoucherSpec{Stock: 1000, Limit: 1})
	w, h := startFailingOrderWriter(t, proxied, rdb, writer.Options{
		Batch: 50, MaxBackoff: 200 * time.Millisecond, AttemptTimeout: 500 * time.Millisecond,
	})
	before := testenv.Sell(t, direct, rdb, v.ID, testenv.Users(1, 100))
	testenv.Drained(t, w, 20*time.Second)

	proxy.Blackhole()
	during := testenv.Sell(t, direct, rdb, v.ID, testenv.Users(1000, 300))
	failed := h.failed.Load()
	testenv.WaitFor(t, "several attempts to meet the dead connections", func() bool { return h.failed.Load() >= failed+3 })
	if n, _ := persistence.InFlight(t.Context(), rdb, v.ID); n != int64(len(during)) {
		t.Fatalf("%d orders in flight while Postgres is silent, want %d", n, len(during))
	}
	proxy.Resume()
	testenv.Drained(t, w, 20*time.Second)
	testenv.AssertPersisted(t, direct, v, append(before, during...))
}

// A writer that backed off through a long outage reads again as soon as
// it is woken (the node wakes it when Redis is back), not at the end of
// a backoff grown meanwhile: a reload's hold waits for what it reads.
// Here the backoff has grown past 3 s; woken, the writer stores
// everything within 1.5 s; without Wake it did 3.2 s after the database
// was back, when that pause ended.
func TestAWokenWriterEndsItsBackoffAtOnce(t *testing.T) {
	t.Parallel()
	direct, proxied, proxy := viaProxy(t)
	rdb := testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, direct, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
	w, h := startFailingOrderWriter(t, proxied, rdb, writer.Options{Batch: 50, MaxBackoff: time.Minute})
	proxy.Down()
	sold := testenv.Sell(t, direct, rdb, v.ID, testenv.Users(1, 20))
	// Each failure doubles the pause from 50 ms.
	testenv.WaitFor(t, "the writer to fail seven times", func() bool { return h.failed.Load() >= 7 })
	proxy.Up()
	at := time.Now()
	w.Wake()
	testenv.Drained(t, w, 10*time.Second)
	if took := time.Since(at); took > 1500*time.Millisecond {
		t.Fatalf("the woken writer stored the orders %v after the database was back, want within 1.5 s (its backoff had grown past 3 s)", took)
	}
	testenv.AssertPersisted(t, direct, v, sold)
}
