package orders

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// Returns committed while Redis was unreachable, and then Redis lost its
// data and was rebuilt from the database (which counted those units
// already): the sweeper must not add them a second time.
func TestPendingReturnsOfALostLoadAreNotAppliedTwice(t *testing.T) {
	t.Parallel()
	const n, cancels = 10, 2
	s := mustStores(t)
	a := newNode(t, s, "a", time.Hour)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: n})
	ids := a.sellTo(v.ID, users(1, n))
	a.drained()
	proxy := testenv.MustProxy(t, s.redis.Addr())
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = cut.Close() })
	crashing := New(persistence.NewOrders(s.db, cut, quiet), a.catalog, Config{}, quiet)
	proxy.Down()
	for u := int64(1); u <= cancels; u++ {
		if _, err := crashing.Cancel(context.Background(), domain.Caller{UserID: u}, ids[u]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.rdb.FlushAll(context.Background()).Err(); err != nil { // our private redis-server
		t.Fatal(err)
	}
	reps, err := a.reconciler.Reconcile(context.Background(), &v.ID, true)
	if err != nil || !reps[0].Repaired {
		t.Fatalf("repair: %+v %v", reps, err)
	}
	if got := s.redisStock(t, v.ID); got != cancels {
		t.Fatalf("rebuilt stock %d, want %d", got, cancels)
	}
	sw := NewSweeper(a.store, a.locker, SweepConfig{Grace: time.Nanosecond}, quiet)
	if _, err := sw.runOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.redisStock(t, v.ID); got != cancels {
		t.Fatalf("stock %d after the sweep, want %d: the returns were counted twice", got, cancels)
	}
	s.mustBalanced(t, a.reconciler, v.ID)
}
