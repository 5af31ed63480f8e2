package persistence_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/internal/catalog"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// heldOrders is the scene of a Redis data loss with orders in flight: a
// voucher of stock 10 (one per user) sold to users 1..5, those orders read
// by an order writer that cannot reach the database (its proxy is down),
// then Redis restarted empty.
type heldOrders struct {
	direct *bun.DB // the database, reached directly (the writer goes through proxy)
	rdb    *redis.Client
	proxy  *testenv.Proxy
	writer *persistence.OrderWriter
	v      domain.Voucher
	first  []int64 // the orders the writer holds
}

const heldStock = 10

func holdOrdersAcrossRedisLoss(t *testing.T) *heldOrders {
	t.Helper()
	dbURL := testenv.MustPostgresURL(t)
	srv := testenv.MustRedis(t) // no persistence: a restart loses everything
	h := &heldOrders{direct: testenv.MustOpen(t, dbURL), rdb: srv.Client()}
	u, _ := url.Parse(dbURL)
	h.proxy = testenv.MustProxy(t, u.Host)
	u.Host = h.proxy.Addr()
	viaProxy := testenv.MustOpen(t, u.String())

	h.v = mustVoucher(t, h.direct, h.rdb, liveSpec(heldStock, 1))
	h.proxy.Down()
	h.writer = runWriter(t, viaProxy, h.rdb, persistence.OrderWriterOptions{MaxBackoff: 50 * time.Millisecond})
	h.first = sell(t, h.direct, h.rdb, h.v.ID, users(1, 5))
	waitFor(t, "the writer to read the orders", func() bool {
		pending, err := h.rdb.XPending(context.Background(), persistence.LogKey(h.v.ID), persistence.OrderLogGroup).Result()
		return err == nil && pending.Count == int64(len(h.first))
	})
	srv.Restart()
	return h
}

// committed waits until the held orders are in the database.
func (h *heldOrders) committed(t *testing.T) {
	t.Helper()
	waitFor(t, "the held orders to be committed", func() bool {
		var n int
		err := h.direct.NewSelect().Table("tb_voucher_order").ColumnExpr("count(*)").Where("voucher_id = ?", h.v.ID).Scan(context.Background(), &n)
		return err == nil && n == len(h.first)
	})
}

// sellOut offers the voucher to users 1..10 again: only 6..10 may get it
// (1..5 hold one), and the database must end with exactly the OK'd orders.
func (h *heldOrders) sellOut(t *testing.T) {
	t.Helper()
	second := sell(t, h.direct, h.rdb, h.v.ID, users(1, 10))
	if len(h.first)+len(second) != heldStock {
		t.Fatalf("%d + %d grabs answered OK for a stock of %d", len(h.first), len(second), heldStock)
	}
	drained(t, h.writer, 20*time.Second)
	assertPersisted(t, h.direct, h.v, append(h.first, second...))
}

// Redis loses its data while the order writer holds orders it has read but
// not yet committed (the database is unreachable for it). The voucher is
// reloaded from the database, which cannot count those orders, and only
// then does the writer commit them. The reloaded stock must not sell their
// units again, nor let their users buy again.
func TestOrdersInFlightAcrossARedisReloadAreNotSoldAgain(t *testing.T) {
	h := holdOrdersAcrossRedisLoss(t)
	ctx := context.Background()
	cat := catalog.New(persistence.NewVouchers(h.direct), persistence.NewStock(h.rdb), quiet)
	if _, err := cat.EnsurePreheated(ctx, h.v.ID); err != nil { // what the next grab's actor does
		t.Fatal(err)
	}
	h.proxy.Up()
	h.committed(t)

	// A replay of orders already committed (a writer that crashed before
	// its acknowledgement) returns nothing to Redis a second time.
	for _, o := range storedOrders(t, h.direct, h.first) {
		err := h.rdb.XAdd(ctx, &redis.XAddArgs{Stream: persistence.LogKey(h.v.ID), Values: []any{
			"o", o.ID, "u", o.UserID, "v", h.v.ID, "t", o.CreateTime.UnixMilli(), "s", 1, "l", "an-earlier-load",
		}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	drained(t, h.writer, 20*time.Second)

	h.sellOut(t)
	if dead, _ := h.rdb.XLen(ctx, "flashsale:order-dead").Result(); dead != 0 {
		t.Fatalf("%d orders dead-lettered", dead)
	}
	if st, _ := persistence.NewGrabs(h.rdb).State(ctx, h.v.ID); st.Remaining != 0 {
		t.Fatalf("redis remaining %d after selling out", st.Remaining)
	}
}

// The same, with the worst timing: the writer reaches the voucher's row
// lock while the reload holds it (Redis written, stamp not yet committed).
// The writer must see the new stamp once it gets the lock, not what was
// committed when it started waiting.
func TestAWriterWaitingOnAReloadSeesItsStamp(t *testing.T) {
	h := holdOrdersAcrossRedisLoss(t)
	ctx := context.Background()

	loaded, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		life := persistence.NewLife()
		done <- persistence.NewVouchers(h.direct).Preload(ctx, h.v.ID, func(ctx context.Context, v domain.Voucher, users map[int64]int) (string, error) {
			if _, err := persistence.NewStock(h.rdb).Preheat(ctx, v, users, life); err != nil {
				return "", err
			}
			close(loaded)
			<-release // hold the row lock while the writer comes
			return life, nil
		})
	}()
	<-loaded
	h.proxy.Up()
	waitFor(t, "the writer to wait for the row lock", func() bool {
		var n int
		err := h.direct.NewSelect().TableExpr("pg_stat_activity").ColumnExpr("count(*)").
			Where("datname = current_database() AND wait_event_type = 'Lock'").Scan(ctx, &n)
		return err == nil && n > 0
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.committed(t)
	h.sellOut(t)
}

func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
