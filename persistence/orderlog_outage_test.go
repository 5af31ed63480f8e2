package persistence_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/internal/testenv"
	"flashsale/persistence"
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

func TestOrderWriterWaitsOutAPostgresOutage(t *testing.T) {
	t.Parallel()
	direct, proxied, proxy := viaProxy(t)
	rdb := testenv.MustRedis(t).Client()

	v := testenv.MustVoucher(t, direct, rdb, testenv.VoucherSpec{Stock: 1000, Limit: 1})
	w := runWriter(t, proxied, rdb, writer.Options{Batch: 50, MaxBackoff: 200 * time.Millisecond})
	before := sell(t, direct, rdb, v.ID, users(1, 100))
	drained(t, w, 20*time.Second)

	proxy.Down()
	during := sell(t, direct, rdb, v.ID, users(1000, 300)) // grabs go on
	time.Sleep(2 * time.Second)
	if n, _ := persistence.InFlight(t.Context(), rdb, v.ID); n != int64(len(during)) {
		t.Fatalf("%d orders in flight during the outage, want %d", n, len(during))
	}
	proxy.Up()
	drained(t, w, 30*time.Second)
	assertPersisted(t, direct, v, append(before, during...))
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
	w := runWriter(t, proxied, rdb, writer.Options{
		Batch: 50, MaxBackoff: 200 * time.Millisecond, AttemptTimeout: 500 * time.Millisecond,
	})
	before := sell(t, direct, rdb, v.ID, users(1, 100))
	drained(t, w, 20*time.Second)

	proxy.Blackhole()
	during := sell(t, direct, rdb, v.ID, users(1000, 300))
	time.Sleep(2 * time.Second) // several attempts meet the dead connections
	if n, _ := persistence.InFlight(t.Context(), rdb, v.ID); n != int64(len(during)) {
		t.Fatalf("%d orders in flight while Postgres is silent, want %d", n, len(during))
	}
	proxy.Resume()
	drained(t, w, 20*time.Second)
	assertPersisted(t, direct, v, append(before, during...))
}
