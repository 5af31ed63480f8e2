package orders

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/testkit/testenv"
)

// Pay, owner cancellation and the pay-timeout cancellation of two nodes
// race on the same 1,000 orders: each order ends in exactly one final
// state, whoever won is what the others were told, each cancelled order
// gave back exactly one unit and one user slot, and reconciliation is
// exact afterwards.
func TestPayCancelAndTimeoutRaceEndEachOrderOnce(t *testing.T) {
	t.Parallel()
	const n = 1000
	s := mustStores(t)
	a := newNode(t, s, "a", time.Hour)
	b := newNode(t, s, "b", time.Hour)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: n})
	ids := a.sellTo(v.ID, users(1, n))
	a.drained()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A pay timeout of a nanosecond makes every order due at once: the
	// two nodes' timeout services race the owners from the start.
	var timeouts []*Timeouts
	for _, nd := range []*node{a, b} {
		tm := NewTimeouts(nd.store, nd.locker, TimeoutConfig{PayTimeout: time.Nanosecond, Interval: time.Millisecond, Batch: 50}, quiet)
		if err := tm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		timeouts = append(timeouts, tm)
	}
	var paid, cancelled sync.Map // order id -> true, for answers that said so
	var wg sync.WaitGroup
	for u, id := range ids {
		// Staggered by up to 20 ms so that the timeout services win some
		// orders too, rather than only the first batch.
		stagger := time.Duration(u%21) * time.Millisecond
		wg.Go(func() {
			time.Sleep(stagger)
			if o, err := a.service.Pay(ctx, domain.Caller{UserID: u}, id); err == nil {
				if o.Status != domain.OrderPaid {
					t.Errorf("pay of order %d answered status %d", id, o.Status)
				}
				paid.Store(id, true)
			} else if domain.ErrorCode(err) != domain.CodeBadInput {
				t.Errorf("pay of order %d: %v", id, err)
			}
		})
		wg.Go(func() {
			time.Sleep(stagger)
			if o, err := b.service.Cancel(ctx, domain.Caller{UserID: u}, id); err == nil {
				if o.Status != domain.OrderCancelled {
					t.Errorf("cancel of order %d answered status %d", id, o.Status)
				}
				cancelled.Store(id, true)
			} else if domain.ErrorCode(err) != domain.CodeBadInput {
				t.Errorf("cancel of order %d: %v", id, err)
			}
		})
	}
	wg.Wait()
	testenv.WaitFor(t, "no unpaid order left", func() bool {
		var left int
		_ = s.db.NewSelect().Table("tb_voucher_order").ColumnExpr("COUNT(*)").Where("status = 1").Scan(context.Background(), &left)
		return left == 0
	})
	for _, tm := range timeouts {
		tm.Stop()
	}

	var rows []struct {
		ID     int64   `bun:"id"`
		Status int     `bun:"status"`
		Reason *string `bun:"cancel_reason"`
	}
	if err := s.db.NewSelect().Table("tb_voucher_order").Column("id", "status", "cancel_reason").Scan(context.Background(), &rows); err != nil {
		t.Fatal(err)
	}
	var nPaid, nCancelled, nTimeout int
	for _, r := range rows {
		_, saidPaid := paid.Load(r.ID)
		_, saidCancelled := cancelled.Load(r.ID)
		switch {
		case r.Status == int(domain.OrderPaid):
			nPaid++
			if !saidPaid || saidCancelled {
				t.Errorf("order %d is paid; pay said ok %v, cancel said ok %v", r.ID, saidPaid, saidCancelled)
			}
		case r.Status == int(domain.OrderCancelled) && r.Reason != nil && *r.Reason == domain.CancelByOwner:
			nCancelled++
			if saidPaid || !saidCancelled {
				t.Errorf("order %d is cancelled by its owner; pay said ok %v, cancel said ok %v", r.ID, saidPaid, saidCancelled)
			}
		case r.Status == int(domain.OrderCancelled) && r.Reason != nil && *r.Reason == domain.CancelTimeout:
			nTimeout++
			if saidPaid || saidCancelled {
				t.Errorf("order %d timed out; pay said ok %v, cancel said ok %v", r.ID, saidPaid, saidCancelled)
			}
		default:
			t.Errorf("order %d ended in status %d reason %v", r.ID, r.Status, r.Reason)
		}
	}
	t.Logf("paid %d, cancelled %d, timed out %d", nPaid, nCancelled, nTimeout)
	if nPaid+nCancelled+nTimeout != n {
		t.Fatalf("%d orders in final states, want %d", nPaid+nCancelled+nTimeout, n)
	}
	var ledgerRows int
	if err := s.db.NewSelect().Table("tb_stock_ledger").ColumnExpr("COUNT(*)").
		Where("voucher_id = ? AND reason IN ('cancel', 'timeout')", v.ID).Scan(context.Background(), &ledgerRows); err != nil {
		t.Fatal(err)
	}
	if ledgerRows != nCancelled+nTimeout {
		t.Errorf("%d cancel/timeout ledger rows for %d cancelled orders", ledgerRows, nCancelled+nTimeout)
	}
	rec := s.mustBalanced(t, a.reconciler, v.ID)
	if got := s.redisStock(t, v.ID); got != nCancelled+nTimeout || rec.Live != nPaid {
		t.Errorf("redis stock %d, live %d; want %d returned units and %d live", got, rec.Live, nCancelled+nTimeout, nPaid)
	}
}

// A sold-out voucher sells again after cancellations, on every node:
// exactly as many more units as were cancelled, and not one more.
func TestCancelledUnitsSellAgainOnEveryNode(t *testing.T) {
	t.Parallel()
	const stock, cancels = 50, 10
	s := mustStores(t)
	a := newNode(t, s, "a", time.Hour)
	b := newNode(t, s, "b", time.Hour)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: stock})
	ids := a.sellTo(v.ID, users(1, stock))
	// Both nodes' actors now know the voucher is sold out.
	for _, nd := range []*node{a, b} {
		if res := nd.grab(v.ID, 10_000); res.Code != domain.SeckillSoldOut {
			t.Fatalf("grab after the sell-out: %s", res.Code)
		}
	}
	a.drained()
	for u := int64(1); u <= cancels; u++ {
		nd := []*node{a, b}[u%2]
		if _, err := nd.service.Cancel(context.Background(), domain.Caller{UserID: u}, ids[u]); err != nil {
			t.Fatalf("cancel: %v", err)
		}
	}
	var ok atomic.Int64
	var okOn [2]atomic.Int64
	deadline := time.Now().Add(5 * time.Second)
	next := int64(20_000)
	for ok.Load() < cancels && time.Now().Before(deadline) {
		var wg sync.WaitGroup
		for i := range 2 {
			u := next + int64(i)
			wg.Go(func() {
				if res := []*node{a, b}[i].grab(v.ID, u); res.Code == domain.SeckillOK {
					ok.Add(1)
					okOn[i].Add(1)
				}
			})
		}
		wg.Wait()
		next += 2
	}
	// Then many more new users on both nodes: none may get a unit.
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if res := []*node{a, b}[i%2].grab(v.ID, 30_000+int64(i)); res.Code == domain.SeckillOK {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if got := ok.Load(); got != cancels {
		t.Fatalf("%d grabs sold after %d cancellations, want exactly %d", got, cancels, cancels)
	}
	t.Logf("resold on node a: %d, node b: %d", okOn[0].Load(), okOn[1].Load())
	a.drained()
	b.drained()
	if rec := s.mustBalanced(t, a.reconciler, v.ID); rec.Remaining != 0 || rec.Live != stock {
		t.Fatalf("after the resale: %+v", rec)
	}
}

// Unpaid orders time out after PAY_TIMEOUT with two nodes running the
// timeout service: their units come back once each, paid orders stay
// paid, and a late payment is told the order timed out.
func TestUnpaidOrdersTimeOutOnceWithTwoNodes(t *testing.T) {
	t.Parallel()
	const n, pay = 20, 5
	const payTimeout = 2 * time.Second
	s := mustStores(t)
	a := newNode(t, s, "a", payTimeout)
	b := newNode(t, s, "b", payTimeout)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: n})
	ids := a.sellTo(v.ID, users(1, n))
	a.drained()
	for u := int64(1); u <= pay; u++ {
		if _, err := a.service.Pay(context.Background(), domain.Caller{UserID: u}, ids[u]); err != nil {
			t.Fatalf("pay: %v", err)
		}
	}
	// The jobs themselves run, each on its node under the lease, and
	// report every run: the test counts what they say they cancelled,
	// and waits for a few more runs of each once all are, in which
	// nothing more may be cancelled.
	var runs sync.WaitGroup
	var total atomic.Int64
	var after [2]atomic.Int64 // runs of each node's job since every due order was cancelled
	for i, nd := range []*node{a, b} {
		tm := NewTimeouts(nd.store, nd.locker, TimeoutConfig{PayTimeout: payTimeout, Interval: 50 * time.Millisecond}, quiet)
		signals := tm.TestSignals()
		if err := tm.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer tm.Stop()
		runs.Go(func() {
			for run := range signals {
				done := total.Load() >= n-pay
				total.Add(int64(run.Result))
				if done {
					if after[i].Add(1) == 3 {
						return
					}
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { runs.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatalf("the timeout jobs cancelled %d orders in 30s, want %d", total.Load(), n-pay)
	}
	if got := total.Load(); got != n-pay {
		t.Fatalf("the timeout services reported %d cancellations, want %d", got, n-pay)
	}
	for u, id := range ids {
		o, err := b.service.Get(context.Background(), domain.Caller{UserID: u}, id)
		if err != nil {
			t.Fatal(err)
		}
		want := domain.OrderCancelled
		if u <= pay {
			want = domain.OrderPaid
		}
		if o.Status != want || (want == domain.OrderCancelled && o.CancelReason != domain.CancelTimeout) {
			t.Errorf("order of user %d: status %d reason %q, want %d", u, o.Status, o.CancelReason, want)
		}
		if !o.PayDeadline.Equal(o.CreatedAt.Add(payTimeout)) {
			t.Errorf("pay deadline %s for an order created %s", o.PayDeadline, o.CreatedAt)
		}
	}
	_, err := a.service.Pay(context.Background(), domain.Caller{UserID: n}, ids[n])
	if domain.ErrorCode(err) != domain.CodeBadInput {
		t.Errorf("a late payment: %v, want BAD_USER_INPUT", err)
	}
	if got := s.redisStock(t, v.ID); got != n-pay {
		t.Errorf("redis stock %d after the timeouts, want %d", got, n-pay)
	}
	s.mustBalanced(t, a.reconciler, v.ID)
	// The timed-out buyers got their slots back, in Redis and in the
	// database's guard: they buy again and their orders are recorded.
	b.mustResell(a.reconciler, v.ID, users(pay+1, n-pay), n)
}

// After Redis loses everything, reconcile with repair rebuilds the
// voucher's remaining stock and users' counts from the database: the next
// grabs neither oversell nor let a buyer past the limit.
func TestReconcileRepairRebuildsRedisAfterItLostItsData(t *testing.T) {
	t.Parallel()
	const stock, sold = 20, 15
	s := mustStores(t)
	a := newNode(t, s, "a", time.Hour)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: stock})
	ids := a.sellTo(v.ID, users(1, sold))
	a.drained()
	// One cancelled order, so the rebuilt state is not the plain sale.
	if _, err := a.service.Cancel(context.Background(), domain.Caller{UserID: 1}, ids[1]); err != nil {
		t.Fatal(err)
	}
	s.mustBalanced(t, a.reconciler, v.ID)
	if err := s.rdb.FlushAll(context.Background()).Err(); err != nil { // our private redis-server
		t.Fatal(err)
	}
	reps, err := a.reconciler.Reconcile(context.Background(), &v.ID, false)
	if err != nil || len(reps) != 1 || reps[0].Balanced() || reps[0].Loaded {
		t.Fatalf("reconcile after the flush: %+v %v", reps, err)
	}
	reps, err = a.reconciler.Reconcile(context.Background(), &v.ID, true)
	if err != nil || len(reps) != 1 || !reps[0].Repaired || !reps[0].Balanced() {
		t.Fatalf("repair: %+v %v", reps, err)
	}
	if got := s.redisStock(t, v.ID); got != stock-sold+1 {
		t.Fatalf("rebuilt stock %d, want %d", got, stock-sold+1)
	}
	time.Sleep(100 * time.Millisecond) // the reload's hold (ReloadHold) is over
	var ok atomic.Int64
	var wg sync.WaitGroup
	for u := int64(1); u <= 40; u++ { // 15 earlier buyers (one cancelled) and 25 new users
		wg.Go(func() {
			res := a.grab(v.ID, u)
			if res.Code == domain.SeckillOK {
				ok.Add(1)
				if u >= 2 && u <= sold {
					t.Errorf("user %d holds an order and got another", u)
				}
			}
		})
	}
	wg.Wait()
	if got := ok.Load(); got != stock-sold+1 {
		t.Fatalf("%d grabs sold after the repair, want %d", got, stock-sold+1)
	}
	a.drained()
	s.mustBalanced(t, a.reconciler, v.ID)
}

// addStock adds units once per key, raises stock and initial stock with a
// ledger row, lets a sold-out voucher sell again, and an ENDED voucher
// takes none and stays ended.
func TestAddStockOncePerKeyAndEndedIsFinal(t *testing.T) {
	t.Parallel()
	s := mustStores(t)
	a := newNode(t, s, "a", time.Hour)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 2})
	a.sellTo(v.ID, users(1, 2))
	if res := a.grab(v.ID, 3); res.Code != domain.SeckillSoldOut {
		t.Fatalf("grab: %s", res.Code)
	}
	ctx := context.Background()
	for range 3 {
		l, err := a.service.AddStock(ctx, domain.Restock{VoucherID: v.ID, Amount: 5, Key: "k1"})
		if err != nil || l.Initial != 7 || l.Remaining != 5 {
			t.Fatalf("addStock: %+v %v", l, err)
		}
	}
	testenv.WaitFor(t, "the restock sells", func() bool { return a.grab(v.ID, 3).Code == domain.SeckillOK })
	a.drained()
	s.mustBalanced(t, a.reconciler, v.ID)
	for _, amount := range []int{0, -1, domain.MaxRestock + 1} {
		if _, err := a.service.AddStock(ctx, domain.Restock{VoucherID: v.ID, Amount: amount}); domain.ErrorCode(err) != domain.CodeBadInput {
			t.Errorf("amount %d: %v", amount, err)
		}
	}
	if _, err := a.catalog.SetStatus(ctx, v.ID, domain.StatusEnded); err != nil {
		t.Fatal(err)
	}
	if _, err := a.service.AddStock(ctx, domain.Restock{VoucherID: v.ID, Amount: 1}); domain.ErrorCode(err) != domain.CodeBadInput {
		t.Errorf("restock of an ended voucher: %v", err)
	}
	if _, err := a.catalog.SetStatus(ctx, v.ID, domain.StatusActive); domain.ErrorCode(err) != domain.CodeBadInput {
		t.Errorf("resuming an ended voucher: %v", err)
	}
}
