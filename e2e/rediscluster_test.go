package e2e

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"flashsale/testkit/testenv"
)

// Six vouchers sold out at once through a Redis Cluster of three primaries
// with a replica each, their keys spread over at least two primaries: each
// voucher sells exactly its stock, every OK'd order reaches Postgres once
// for its buyer, and each voucher reconciles on the primary that holds it.
func TestRedisClusterSellsSixVouchersAtOnce(t *testing.T) {
	t.Parallel()
	extra := map[string]string{"REDIS_MODE": "cluster", "REDIS_ACK_REPLICAS": "1", "REDIS_ACK_TIMEOUT": "1s"}
	cl := testenv.MustReplicatedCluster(t)
	extra["REDIS_URL"] = cl.URL()
	n := startOutageNode(t, cl.Nodes[0], extra)
	ctx := t.Context()
	const vouchers, stock, buyers = 6, 10, 20
	ids := make([]string, vouchers)
	holders := map[string]*testenv.RedisServer{}
	spread := map[*testenv.RedisServer]bool{}
	for i := range ids {
		ids[i] = n.createVoucher(t, stock)
		p, err := cl.PrimaryOf(ctx, "{v"+ids[i]+"}:stock")
		if err != nil {
			t.Fatal(err)
		}
		holders[ids[i]], spread[p] = p, true
	}
	if len(spread) < 2 {
		t.Fatalf("the six vouchers' keys are all on one primary; the test needs them spread")
	}

	var (
		mu sync.Mutex
		ok = map[string]map[string]int64{} // voucher -> order id -> buyer
		wg sync.WaitGroup
	)
	for _, v := range ids {
		ok[v] = map[string]int64{}
		for b := int64(1); b <= buyers; b++ {
			wg.Go(func() {
				req := "r" + strconv.FormatInt(b, 10)
				deadline := time.Now().Add(30 * time.Second)
				for {
					code, orderID, _ := n.grabAs(t, b, v, req)
					if code == "OK" {
						mu.Lock()
						ok[v][orderID] = b
						mu.Unlock()
					}
					if code != "UNAVAILABLE" {
						return
					}
					if time.Now().After(deadline) {
						t.Errorf("voucher %s request %s still UNAVAILABLE after 30s", v, req)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	for _, v := range ids {
		if len(ok[v]) != stock {
			t.Errorf("voucher %s: %d orders answered OK, want exactly the stock %d", v, len(ok[v]), stock)
		}
		n.redis = holders[v] // the reconciliation reads the voucher's primary
		assertLanded(t, n, v, ok[v], stock)
	}
}
