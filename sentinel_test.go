package main

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/internal/testenv"
)

// sentinelNode is a node whose REDIS_URL names only a sentinel: a primary
// and one replica, real processes, and one sentinel that monitors them.
func sentinelNode(t *testing.T, extra map[string]string) (n *outageNode, primary, replica *testenv.RedisServer) {
	t.Helper()
	primary = testenv.MustRedis(t)
	replica = testenv.MustReplica(t, primary)
	sentinel := testenv.MustSentinel(t, primary, "flashsale", 1)
	env := map[string]string{"REDIS_MODE": "sentinel", "REDIS_URL": testenv.SentinelURL("flashsale", sentinel)}
	for k, v := range extra {
		env[k] = v
	}
	return startOutageNode(t, primary, env), primary, replica
}

// grabAs is one grab of user with a request id: its code and order id.
func (n *outageNode) grabAs(t *testing.T, user int64, voucherID, requestID string) (code, orderID string, took time.Duration) {
	t.Helper()
	token, _ := n.tokens.Issue(auth.Identity{UserID: user, Role: auth.RoleUser}, time.Hour)
	began := time.Now()
	code, orderID, err := grabWithKey(n.client, n.base, token, voucherID, requestID)
	if err != nil {
		t.Fatalf("grab of user %d: %v", user, err)
	}
	return code, orderID, time.Since(began)
}

// With REDIS_MODE=sentinel the service finds the primary through the
// sentinel (REDIS_URL names no Redis server at all), sells a voucher out
// exactly through it, and every OK'd order reaches the database.
func TestSentinelModeSellsThroughThePrimaryTheSentinelNames(t *testing.T) {
	t.Parallel()
	n, _, _ := sentinelNode(t, nil)
	const stock = 5
	voucher := n.createVoucher(t, stock)
	ok := map[string]int64{}
	codes := map[string]int{}
	for u := int64(1); u <= 2*stock; u++ {
		code, orderID, _ := n.grabAs(t, u, voucher, "r"+strconv.FormatInt(u, 10))
		codes[code]++
		if code == "OK" {
			ok[orderID] = u
		}
	}
	if codes["OK"] != stock || codes["SOLD_OUT"] != stock {
		t.Fatalf("answers %v, want %d OK and %d SOLD_OUT", codes, stock, stock)
	}
	assertLanded(t, n, voucher, ok, stock)
}

// With REDIS_ACK_REPLICAS=1 a grab is answered OK only once the replica
// holds its sale. While the replica is stopped (SIGSTOP) grabs of three
// vouchers at once answer UNAVAILABLE within the batch's deadline; once it
// is back, each request id is answered at once with its order, the one
// order it ever gets. "At once": a replica that did not acknowledge is an
// answer of the primary, not a failed call, so the circuit breaker stays
// closed (open, it would refuse grabs for two seconds).
func TestAcknowledgedGrabsWaitForTheReplica(t *testing.T) {
	t.Parallel()
	// Longer than the request path's 200 ms read timeout: the grab
	// scripts' client must leave room for WAIT.
	n, _, replica := sentinelNode(t, map[string]string{"REDIS_ACK_REPLICAS": "1", "REDIS_ACK_TIMEOUT": "300ms"})
	const stock = 3
	vouchers := make([]string, 3)
	ok := make([]map[string]int64, len(vouchers))
	for i := range vouchers {
		vouchers[i], ok[i] = n.createVoucher(t, stock), map[string]int64{}
	}
	code, first, _ := n.grabAs(t, 1, vouchers[0], "r1")
	if code != "OK" {
		t.Fatalf("acknowledged grab: %s", code)
	}
	ok[0][first] = 1

	replica.Pause()
	paused := true
	defer func() {
		if paused {
			replica.Continue()
		}
	}()
	buyer := func(i int) (int64, string) { return int64(10 + i), "r" + strconv.Itoa(10+i) }
	for attempt := range 2 {
		var wg sync.WaitGroup
		for i, v := range vouchers {
			wg.Go(func() {
				user, req := buyer(i)
				code, _, took := n.grabAs(t, user, v, req)
				// The batch's deadline: 400 ms and the acknowledgement's
				// 300 ms, with room for two busy cores.
				if code != "UNAVAILABLE" || took > 1200*time.Millisecond {
					t.Errorf("attempt %d on voucher %s with the replica stopped: %s after %s, want UNAVAILABLE within 1.2s", attempt, v, code, took)
				}
			})
		}
		wg.Wait()
	}
	if t.Failed() {
		return
	}
	replica.Continue()
	paused = false

	for i, v := range vouchers {
		user, req := buyer(i)
		code, orderID, _ := n.grabAs(t, user, v, req)
		if code != "OK" {
			t.Fatalf("request %s once the replica is back: %s, want OK at once", req, code)
		}
		if again, id, _ := n.grabAs(t, user, v, req); again != "OK" || id != orderID {
			t.Fatalf("request %s again: %s %s, want OK %s", req, again, id, orderID)
		}
		ok[i][orderID] = user
	}
	for i, v := range vouchers {
		if orders := assertLanded(t, n, v, ok[i], stock); orders != len(ok[i]) {
			t.Fatalf("voucher %s: %d orders in the database, want %d: a request id sold twice", v, orders, len(ok[i]))
		}
	}
}
