package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"flashsale/testkit/testenv"
)

// A pause made while the node's Redis is down (its connections refused,
// the breaker open) is committed and answered as done; when Redis answers
// again, the re-sync copies it before grabs use Redis, so the first grab
// Redis decides is PAUSED. STATUS_SYNC_INTERVAL is a minute here, so that
// only the re-sync can have copied it.
func TestAPauseMadeWhileRedisIsDownHoldsOnceItIsBack(t *testing.T) {
	redisSrv := testenv.MustRedis(t)
	proxy := testenv.MustProxy(t, redisSrv.Addr())
	n := startOutageNode(t, redisSrv, map[string]string{"REDIS_URL": "redis://" + proxy.Addr() + "/0", "STATUS_SYNC_INTERVAL": "1m", "RATE_USER_PER_SEC": "0"})
	voucherID := n.createVoucher(t, 10)
	if code, _, _ := n.grab(t, 1, voucherID); code != "OK" {
		t.Fatalf("first grab: %s", code)
	}

	proxy.Down()
	eventually(t, "the breaker opens", 10*time.Second, func() bool {
		n.grab(t, 2, voucherID)
		return metric(t, n.base, `flashsale_breaker_state{store="redis"}`) == "2"
	})
	out, _ := n.post(t, 0, fmt.Sprintf(`mutation { setVoucherStatus(id: "%s", status: PAUSED) { status } }`, voucherID))
	if out["errors"] != nil || fmt.Sprint(out["data"]) != "map[setVoucherStatus:map[status:PAUSED]]" {
		t.Fatalf("pause while redis is down answered %v, want the committed pause", out)
	}
	meta := "{v" + voucherID + "}:meta"
	if s, _ := redisSrv.Client().HGet(context.Background(), meta, "status").Result(); s != "1" {
		t.Fatalf("redis status %q while its connections are refused, want still 1 (ACTIVE)", s)
	}

	proxy.Up()
	code, _ := n.grabUntilDecided(t, 3, voucherID, 15*time.Second)
	if s, _ := redisSrv.Client().HGet(context.Background(), meta, "status").Result(); code != "PAUSED" || s != "2" {
		t.Fatalf("first decided grab after redis came back: %s, redis status %q; want PAUSED and 2", code, s)
	}
}
