package actors_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// stallingNode is a router whose grab scripts go through a client the
// test can stall (requests still run in Redis, their replies are lost),
// with order ids taken straight from Redis so that only the script's
// replies are lost.
type stallingNode struct {
	*actors.Router
	grabs *testenv.StallingClient
}

func (e *env) stallingNode(tb testing.TB, opts actors.Options) stallingNode {
	tb.Helper()
	n := stallingNode{grabs: testenv.MustStallingClient(tb, e.redis.Addr())}
	n.Router = actors.NewRouter(persistence.NewGrabs(n.grabs), testenv.MustOrderIDs(tb, e.db), e.catalog, quiet, opts)
	tb.Cleanup(n.Stop)
	return n
}

// waitSold waits until Redis remembers n sold requests of the voucher.
func (e *env) waitSold(tb testing.TB, voucherID int64, n int64) {
	tb.Helper()
	key := "{v" + strconv.FormatInt(voucherID, 10) + "}:req"
	testenv.WaitFor(tb, "redis sold "+strconv.FormatInt(n, 10)+" requests", func() bool {
		got, _ := e.rdb.HLen(context.Background(), key).Result()
		return got >= n
	})
}

// ordersOf returns the ids of the user's orders of the voucher in the
// database.
func (e *env) ordersOf(tb testing.TB, voucherID, userID int64) []int64 {
	tb.Helper()
	var ids []int64
	if err := e.db.NewSelect().Table("tb_voucher_order").Column("id").
		Where("voucher_id = ? AND user_id = ?", voucherID, userID).Scan(context.Background(), &ids); err != nil {
		tb.Fatal(err)
	}
	return ids
}

// A grab that sold the last unit, whose reply was lost and whose retried
// batch met a newer activation, is re-routed to a fresh activation that
// knows the voucher is sold out. It must still be decided by its request
// id in Redis: its buyer gets the order, never SOLD_OUT.
func TestAReroutedGrabThatSoldIsNotAnsweredSoldOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 2, 1)
	w := e.writer(t)
	// The batch's attempts may take up to 10 × 200 ms: node b's activation
	// must fit between the lost reply and a's next attempt, which a batch
	// deadline of the default 400 ms left only about 180 ms for.
	a := e.stallingNode(t, actors.Options{CallTimeout: 200 * time.Millisecond, Attempts: 10, BatchTimeout: 10 * time.Second, GrabTimeout: 10 * time.Second})
	b := e.router(t, nil, actors.Options{})
	if c := a.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 10}).Code; c != domain.SeckillOK {
		t.Fatalf("first unit: %s", c) // node a's activation holds the first fence
	}

	a.grabs.Proxy.Stall()
	res := grabAsync(a.Router, context.Background(), id, 1)
	e.waitSold(t, id, 2) // the script sold user 1 the last unit
	a.grabs.LostReply(t) // and its reply is lost; node a retries the batch
	// Another node activates the voucher (a newer fence) and sees it sold out.
	if c := b.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 2}).Code; c != domain.SeckillSoldOut {
		t.Fatalf("user 2 on node b: %s, want SOLD_OUT", c)
	}
	a.grabs.Proxy.Resume() // a's retried batch is now refused as stale and re-routed

	got := <-res
	testenv.Drained(t, w, 30*time.Second)
	orders := e.ordersOf(t, id, 1)
	if len(orders) != 1 {
		t.Fatalf("user 1 holds %d orders in the database, want 1", len(orders))
	}
	if got.Code != domain.SeckillOK || got.OrderID != orders[0] {
		t.Fatalf("user 1 bought order %d but was answered %s (order %d)", orders[0], got.Code, got.OrderID)
	}
}

// onceStale refuses its first batch as superseded (as a newer activation
// would), then sells.
type onceStale struct {
	recordingStore
	refused atomic.Bool
}

func (s *onceStale) Grab(ctx context.Context, voucherID int64, seg int, fence int64, g []domain.Grab) (domain.BatchOutcome, error) {
	if s.refused.CompareAndSwap(false, true) {
		return domain.BatchOutcome{Stale: true}, nil
	}
	return s.recordingStore.Grab(ctx, voucherID, seg, fence, g)
}

// onePerIP admits each address's first grab and limits every later one.
type onePerIP struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (l *onePerIP) Enabled() bool { return true }

func (l *onePerIP) Admit(_ context.Context, _ int64, checks []domain.RateCheck) ([]time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	waits := make([]time.Duration, len(checks))
	for i, c := range checks {
		if l.seen[c.IP] {
			waits[i] = time.Second
		}
		l.seen[c.IP] = true
	}
	return waits, nil
}

// A grab re-routed after a stale batch was admitted already: limiting it
// again could answer RATE_LIMITED for a grab whose earlier attempt sold.
func TestAReroutedGrabIsNotRateLimitedAgain(t *testing.T) {
	t.Parallel()
	st := &onceStale{}
	r := actors.NewRouter(st, &seqIDs{}, nil, quiet, actors.Options{Limits: &onePerIP{seen: map[string]bool{}}})
	t.Cleanup(r.Stop)
	if got := r.Grab(t.Context(), domain.GrabRequest{VoucherID: 1, UserID: 1, ClientIP: "10.1.1.1"}); got.Code != domain.SeckillOK || !st.soldTo(1) {
		t.Fatalf("re-routed grab: %s, want OK", got.Code)
	}
}
