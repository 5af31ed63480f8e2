package orders

import (
	"context"
	"sync"
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// A node that committed cancellations but lost Redis before applying them
// (as if it crashed in between) leaves them pending; the sweeper applies
// each exactly once however many times, and from however many nodes, it
// runs, and the cancelled users can buy again.
func TestSweeperReturnsUnitsACrashLeftPendingExactlyOnce(t *testing.T) {
	t.Parallel()
	const n, cancels = 10, 4
	s, a, v := strandedReturns(t, n, cancels)
	if got := s.redisStock(t, v.ID); got != 0 {
		t.Fatalf("redis stock %d before the sweep, want 0", got)
	}
	rec, err := persistence.NewReconciliations(s.db, s.rdb).Reconcile(context.Background(), v.ID)
	if err != nil || rec.Pending != cancels || !rec.Balanced() {
		t.Fatalf("reconciliation with returns pending: %+v %v", rec, err)
	}

	// Sweepers of two nodes, several runs each, at once.
	var wg sync.WaitGroup
	var total int
	var mu sync.Mutex
	for _, nd := range []*node{a, newNode(t, s, "b", time.Hour)} {
		sw := NewSweeper(nd.store, nd.locker, SweepConfig{Grace: time.Nanosecond}, quiet)
		for range 3 {
			wg.Go(func() {
				got, err := sw.RunOnce(context.Background())
				if err != nil {
					t.Errorf("sweep: %v", err)
				}
				mu.Lock()
				total += got
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if total < cancels {
		t.Fatalf("sweeps handled %d pending changes, want at least %d", total, cancels)
	}
	if got := s.redisStock(t, v.ID); got != cancels {
		t.Fatalf("redis stock %d after the sweeps, want %d", got, cancels)
	}
	// The cancelled users buy again: their slots came back once.
	a.mustResell(a.reconciler, v.ID, users(1, cancels), n)
}

// An order the order log holds and the database does not yet is visible
// to its owner at once (and to nobody else); paying it waits for the
// order writer, and answers UNAVAILABLE if the writer does not come in
// time.
func TestOrderInTheOrderLogIsVisibleAndPayableOnceRecorded(t *testing.T) {
	t.Parallel()
	s := mustStores(t)
	a := newNode(t, s, "a", time.Hour)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 5})
	a.stopWriter() // no order writer runs: the order stays in the log

	router := actors.NewRouter(persistence.NewGrabs(s.rdb), testenv.MustOrderIDs(t, s.db), a.catalog, quiet, actors.Options{})
	t.Cleanup(router.Stop)
	res := router.Grab(context.Background(), domain.GrabRequest{VoucherID: v.ID, UserID: 42})
	if res.Code != domain.SeckillOK {
		t.Fatalf("grab: %s", res.Code)
	}
	svc := New(a.store, a.catalog, Config{InFlightWait: 300 * time.Millisecond}, quiet)
	o, err := svc.Get(context.Background(), domain.Caller{UserID: 42}, res.OrderID)
	if err != nil || !o.InFlight || o.Status != domain.OrderUnpaid || o.VoucherID != v.ID {
		t.Fatalf("owner's view of an order in the log: %+v %v", o, err)
	}
	if _, err := svc.Get(context.Background(), domain.Caller{UserID: 43}, res.OrderID); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Fatalf("another user's view: %v", err)
	}
	if _, err := svc.Pay(context.Background(), domain.Caller{UserID: 42}, res.OrderID); domain.ErrorCode(err) != domain.CodeUnavailable {
		t.Fatalf("paying with no writer: %v, want UNAVAILABLE", err)
	}
	svc = New(a.store, a.catalog, Config{InFlightWait: 10 * time.Second}, quiet)
	go func() {
		time.Sleep(200 * time.Millisecond)
		a.startWriter()
	}()
	o, err = svc.Pay(context.Background(), domain.Caller{UserID: 42}, res.OrderID)
	if err != nil || o.Status != domain.OrderPaid || o.InFlight {
		t.Fatalf("paying once the writer runs: %+v %v", o, err)
	}
}

// Returns committed while Redis was unreachable, and then Redis lost its
// data and was rebuilt from the database (which counted those units
// already): the sweeper must not add them a second time.
func TestPendingReturnsOfALostLoadAreNotAppliedTwice(t *testing.T) {
	t.Parallel()
	const n, cancels = 10, 2
	s, a, v := strandedReturns(t, n, cancels)
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
	if _, err := sw.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.redisStock(t, v.ID); got != cancels {
		t.Fatalf("stock %d after the sweep, want %d: the returns were counted twice", got, cancels)
	}
	s.mustBalanced(t, a.reconciler, v.ID)
}

// Repair rebuilds Redis from the database only when the database is the
// whole truth: with orders still in the order log it refuses and leaves
// Redis as it is, or the units those orders hold would be sold again.
func TestRepairRefusesWhileOrdersAreInFlight(t *testing.T) {
	t.Parallel()
	const stock, sold = 5, 3
	s := mustStores(t)
	a := newNode(t, s, "a", time.Hour)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: stock})
	a.stopWriter() // no order writer runs: the orders stay in the log

	router := actors.NewRouter(persistence.NewGrabs(s.rdb), testenv.MustOrderIDs(t, s.db), a.catalog, quiet, actors.Options{})
	t.Cleanup(router.Stop)
	for u := int64(1); u <= sold; u++ {
		if res := router.Grab(context.Background(), domain.GrabRequest{VoucherID: v.ID, UserID: u}); res.Code != domain.SeckillOK {
			t.Fatalf("grab of user %d: %s", u, res.Code)
		}
	}
	// Redis's stock drifts (say an operator's mistake): the voucher no
	// longer balances, and repair is asked for while orders are in flight.
	const drifted = 9
	if err := s.rdb.Set(context.Background(), "{v"+itoa(v.ID)+"}:stock", drifted, 0).Err(); err != nil {
		t.Fatal(err)
	}
	reps, err := a.reconciler.Reconcile(context.Background(), &v.ID, true)
	if err != nil || len(reps) != 1 {
		t.Fatalf("repair: %+v %v", reps, err)
	}
	if reps[0].Balanced() || reps[0].Repaired || reps[0].InFlight != sold {
		t.Fatalf("repair with %d orders in flight: %+v, want it refused", sold, reps[0])
	}
	if got := s.redisStock(t, v.ID); got != drifted {
		t.Fatalf("redis stock %d after the refused repair, want %d untouched", got, drifted)
	}
	// Once the orders are through, the database is the whole truth and
	// the repair goes ahead.
	a.startWriter()
	a.drained()
	reps, err = a.reconciler.Reconcile(context.Background(), &v.ID, true)
	if err != nil || len(reps) != 1 || !reps[0].Repaired {
		t.Fatalf("repair once drained: %+v %v", reps, err)
	}
	if got := s.redisStock(t, v.ID); got != stock-sold {
		t.Fatalf("redis stock %d after the repair, want %d", got, stock-sold)
	}
	s.mustBalanced(t, a.reconciler, v.ID)
}
