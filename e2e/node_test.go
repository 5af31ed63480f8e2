package e2e

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// TestARestartedNodeResumesItsOwnPendingOrders: an order a node read from
// the order log and had not persisted when it died waits in the group's
// pending list under the node's NODE_ID. Restarted under the same
// NODE_ID, the node persists it at once, long before ORDER_LOG_CLAIM_IDLE
// (an hour here) would let any node take it over.
func TestARestartedNodeResumesItsOwnPendingOrders(t *testing.T) {
	t.Parallel()
	redisSrv := testenv.MustRedis(t)
	dbURL := testenv.MustPostgresURL(t)
	db := testenv.MustOpen(t, dbURL)
	rdb := redisSrv.Client()
	ctx := t.Context()
	stock, limit := 10, 1
	begin, end := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	v, err := persistence.NewVouchers(db).Create(ctx, domain.NewVoucher{
		ShopID: 1, Title: "v", PayValue: 1, ActualValue: 2, Type: domain.VoucherSeckill,
		Stock: &stock, BeginAt: &begin, EndAt: &end, PerUserLimit: &limit,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The dead node's last read: an order of the voucher's log, delivered
	// to consumer "node-a" and never acknowledged.
	log := persistence.LogKey(v.ID)
	const orderID = 1 << 40
	if err := rdb.XGroupCreateMkStream(ctx, log, persistence.OrderLogGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	err = rdb.XAdd(ctx, &redis.XAddArgs{Stream: log, Values: []any{
		persistence.EntryOrderID, orderID, persistence.EntryUserID, 7, persistence.EntryVoucherID, v.ID,
		persistence.EntryTime, time.Now().UnixMilli(), persistence.EntrySlot, 1,
	}}).Err()
	if err != nil {
		t.Fatal(err)
	}
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: persistence.OrderLogGroup, Consumer: "node-a", Streams: []string{log, ">"}}).Result()
	if err != nil || len(read) != 1 || len(read[0].Messages) != 1 {
		t.Fatalf("the dead node's read: %v %v", read, err)
	}

	startService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "NODE_ID": "node-a", "ORDER_LOG_CLAIM_IDLE": "1h",
		"REDIS_URL": redisSrv.URL(), "DATABASE_URL": dbURL, "JWT_SECRET": "node-secret-0123456789abcdef0123456", "DEMO": "true",
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.NewSelect().Table("tb_voucher_order").ColumnExpr("count(*)").Where("id = ?", orderID).Scan(ctx, &n); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted node did not persist the order it left pending")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
