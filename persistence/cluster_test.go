package persistence_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/actors/writer"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// On a real three-primary Redis Cluster, each voucher's keys share its
// hash tag, so its preheat, claim and grab scripts run on one node, and
// six vouchers spread over the primaries each sell exactly their stock.
// The order writer cannot read their logs, though: it reads every log in
// one XREADGROUP, which a cluster refuses across slots (CROSSSLOT), so no
// order reaches the database. That is why REDIS_MODE=cluster is refused
// at start; once the writers read per slot, the second half of this test
// becomes "every order in the database" and the refusal goes.
func TestOnARedisClusterVouchersSellExactlyButTheirLogsCannotBeRead(t *testing.T) {
	t.Parallel()
	nodes := testenv.MustRedisCluster(t, 3)
	target, err := persistence.ParseRedisTarget(persistence.RedisCluster, testenv.ClusterURL(nodes...))
	if err != nil {
		t.Fatal(err)
	}
	rdb := target.Client(persistence.RequestTuning(time.Second))
	t.Cleanup(func() { _ = rdb.Close() })
	db := testenv.MustPostgres(t)
	const stock, vouchers = 5, 6
	primaries := map[string]bool{}
	sold := 0
	for range vouchers {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: stock})
		node, err := rdb.(*redis.ClusterClient).MasterForKey(t.Context(), fmt.Sprintf("{v%d}:meta", v.ID))
		if err != nil {
			t.Fatal(err)
		}
		primaries[node.Options().Addr] = true
		users := make([]int64, 2*stock)
		for i := range users {
			users[i] = int64(i + 1)
		}
		if got := len(sell(t, db, rdb, v.ID, users)); got != stock {
			t.Fatalf("voucher %d sold %d of %d", v.ID, got, stock)
		}
		sold += stock
	}
	if len(primaries) < 2 {
		t.Fatalf("the vouchers all live on %v: want them spread over at least two primaries", primaries)
	}

	w := runWriter(t, db, rdb, writer.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	drainErr := w.WaitDrained(ctx)
	var stored int
	if err := db.NewSelect().Table("tb_voucher_order").ColumnExpr("count(*)").Scan(context.Background(), &stored); err != nil {
		t.Fatal(err)
	}
	if drainErr == nil || stored != 0 {
		t.Fatalf("the order writer drained (%v) and stored %d of %d orders: lift the refusal of REDIS_MODE=cluster and make this test ask for every order", drainErr, stored, sold)
	}
}
