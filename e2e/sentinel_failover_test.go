package e2e

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashsale/testkit/testenv"
)

// A sale through a Sentinel set (one primary, two replicas, three
// sentinels) whose primary is killed with SIGKILL mid-sale, with
// REDIS_ACK_REPLICAS=1: an OK is on a replica before it is answered, so
// the replica the sentinels promote sells on from everything OK'd. Each
// buyer asks with one request id until the service decides (UNAVAILABLE
// while the primary changes). No more OKs than the stock, every OK'd
// order in Postgres once for its buyer, no request id with two orders, no
// OK'd order dead-lettered, and the voucher reconciles on the new primary.
//
// The replicas are in step at the kill (on one machine a replica's link
// is never behind for long; a stopped replica process still receives the
// stream in its socket): what was in flight changes hands. Redis going
// back further is the rollback test's case.
func TestSentinelPrimaryKilledMidSaleKeepsEveryOK(t *testing.T) {
	t.Parallel()
	set := testenv.MustSentinelSet(t)
	ctx := t.Context()
	primary, err := set.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := startOutageNode(t, primary, map[string]string{"REDIS_MODE": "sentinel", "REDIS_URL": set.URL(),
		"REDIS_ACK_REPLICAS": "1", "REDIS_ACK_TIMEOUT": "1s"})
	const stock, buyers, workers = 30, 60, 6
	voucher := n.createVoucher(t, stock)

	var (
		mu       sync.Mutex
		ok       = map[string]int64{}    // order id -> buyer
		ordersOf = map[string][]string{} // request id -> orders answered OK
	)
	buy := func(user int64) {
		req := "r" + strconv.FormatInt(user, 10)
		deadline := time.Now().Add(40 * time.Second)
		for {
			code, orderID, _ := n.grabAs(t, user, voucher, req)
			if code == "OK" {
				mu.Lock()
				if prev, seen := ok[orderID]; seen && prev != user {
					t.Errorf("order %s answered to users %d and %d", orderID, prev, user)
				}
				ok[orderID] = user
				if !slices.Contains(ordersOf[req], orderID) {
					ordersOf[req] = append(ordersOf[req], orderID)
				}
				mu.Unlock()
			}
			if code != "UNAVAILABLE" || time.Now().After(deadline) {
				if code == "UNAVAILABLE" {
					t.Errorf("request %s still UNAVAILABLE after 40s", req)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Buyers come in three waves: a third of the stock sold before the
	// kill, the next wave around it, the rest after it.
	wave := func(from, to int64) *sync.WaitGroup {
		var wg sync.WaitGroup
		next := make(chan int64)
		for range workers {
			wg.Go(func() {
				for u := range next {
					buy(u)
				}
			})
		}
		go func() {
			defer close(next)
			for u := from; u <= to; u++ {
				next <- u
			}
		}()
		return &wg
	}
	wave(1, stock/3).Wait()
	around := wave(stock/3+1, 2*stock/3)
	time.Sleep(100 * time.Millisecond) // the wave is selling
	old, err := set.KillPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := wave(2*stock/3+1, buyers)
	around.Wait()
	after.Wait()
	if t.Failed() {
		return
	}
	promoted, err := set.WaitPromoted(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	for req, orders := range ordersOf {
		if len(orders) > 1 {
			t.Errorf("request %s answered OK with orders %v", req, orders)
		}
	}
	if len(ok) > stock {
		t.Fatalf("%d orders answered OK, stock %d", len(ok), stock)
	}
	n.redis = promoted // the reconciliation reads the new primary
	assertLanded(t, n, voucher, ok, stock)
	db := testenv.MustOpen(t, n.dbURL)
	vid, _ := strconv.ParseInt(voucher, 10, 64)
	var dead []int64
	if err := db.NewRaw("SELECT COALESCE(order_id, 0) FROM tb_order_dead_letter WHERE voucher_id = ?", vid).Scan(ctx, &dead); err != nil {
		t.Fatal(err)
	}
	for _, id := range dead {
		if _, answered := ok[strconv.FormatInt(id, 10)]; answered {
			t.Errorf("order %d answered OK was dead-lettered", id)
		}
	}
	t.Logf("primary %s killed after %d buyers, %s promoted; %d OK'd orders of %d, %d dead letters", old.Addr(), stock/3, promoted.Addr(), len(ok), stock, len(dead))
}
