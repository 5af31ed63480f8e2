package graph_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

const keyedGrab = `mutation($id: ID!, $key: String) { seckillVoucher(voucherId: $id, requestId: $key) { code orderId message } }`

type grabAnswer struct {
	Code    string
	OrderID *string
}

// keyedGrab grabs the voucher for the user with a client key ("" for none).
func (s *testServer) keyedGrab(tb testing.TB, user int64, voucherID, key string) grabAnswer {
	tb.Helper()
	vars := map[string]any{"id": voucherID}
	if key != "" {
		vars["key"] = key
	}
	var out struct{ SeckillVoucher grabAnswer }
	s.mustDo(tb, s.token(tb, user, auth.RoleUser), keyedGrab, vars, &out)
	return out.SeckillVoucher
}

// orderRows returns the voucher's orders in the database as order id ->
// user id, once every accepted order is there.
func (s *testServer) orderRows(tb testing.TB, voucherID string) map[string]int64 {
	tb.Helper()
	testenv.Drained(tb, s.writer, time.Minute)
	var rows []struct {
		ID     int64 `bun:"id"`
		UserID int64 `bun:"user_id"`
	}
	if err := s.db.NewSelect().Table("tb_voucher_order").Column("id", "user_id").Where("voucher_id = ?", voucherID).Scan(context.Background(), &rows); err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		out[strconv.FormatInt(r.ID, 10)] = r.UserID
	}
	return out
}

func orderOf(tb testing.TB, a grabAnswer) string {
	tb.Helper()
	if a.Code != "OK" || a.OrderID == nil {
		tb.Fatalf("answer %s, want OK with an order", a.Code)
	}
	return *a.OrderID
}

// The same user and key get the first sale again, also once the voucher
// is sold out and its actor knows it, and never a second order.
func TestARepeatedRequestIDGetsTheFirstOrder(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 1))
	first := orderOf(t, s.keyedGrab(t, 7, v.ID, "buy-1"))
	if got := s.keyedGrab(t, 8, v.ID, ""); got.Code != "SOLD_OUT" {
		t.Fatalf("user 8: %s, want SOLD_OUT", got.Code)
	}
	for i := range 2 {
		if again := orderOf(t, s.keyedGrab(t, 7, v.ID, "buy-1")); again != first {
			t.Fatalf("retry %d: order %s, want the first order %s", i+1, again, first)
		}
	}
	if rows := s.orderRows(t, v.ID); len(rows) != 1 || rows[first] != 7 {
		t.Fatalf("orders in the database %v, want only %s of user 7", rows, first)
	}
}

// Keys are per user: the same key of two users is two purchases.
func TestTwoUsersWithTheSameRequestIDGetTwoOrders(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 5))
	a := orderOf(t, s.keyedGrab(t, 1, v.ID, "same-key"))
	b := orderOf(t, s.keyedGrab(t, 2, v.ID, "same-key"))
	if a == b {
		t.Fatalf("two users got the same order %s", a)
	}
	if rows := s.orderRows(t, v.ID); len(rows) != 2 || rows[a] != 1 || rows[b] != 2 {
		t.Fatalf("orders in the database %v, want %s of user 1 and %s of user 2", rows, a, b)
	}
}

// Only sales are remembered: a key whose first grab did not sell (the sale
// was paused) buys when it is sent again and the sale allows it. With one
// segment the activation's record of the sales answers the paused grab;
// with two there is no record, and the grab script answers it.
func TestARequestIDThatDidNotSellIsANewAttempt(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	const setStatus = `mutation($id: ID!, $st: VoucherStatus!) { setVoucherStatus(id: $id, status: $st) { status } }`
	for _, tc := range []struct {
		name     string
		segments int
	}{
		{"one segment: the record of the sales answers the paused grab", 1},
		{"two segments: the grab script answers the paused grab", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := seckillInput(1, 5)
			in["segments"] = tc.segments
			v := s.createVoucher(t, in)
			s.mustDo(t, s.admin(t), setStatus, map[string]any{"id": v.ID, "st": "PAUSED"}, nil)
			if got := s.keyedGrab(t, 1, v.ID, "k"); got.Code != "PAUSED" {
				t.Fatalf("grab of a paused sale: %s, want PAUSED", got.Code)
			}
			s.mustDo(t, s.admin(t), setStatus, map[string]any{"id": v.ID, "st": "ACTIVE"}, nil)
			order := orderOf(t, s.keyedGrab(t, 1, v.ID, "k"))
			if rows := s.orderRows(t, v.ID); len(rows) != 1 || rows[order] != 1 {
				t.Fatalf("orders in the database %v, want %s of user 1", rows, order)
			}
		})
	}
}

func TestBadRequestIDsAreRefusedAndSellNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 5))
	user := s.token(t, 9, auth.RoleUser)
	for _, tc := range []struct{ name, key string }{
		{"empty", ""},
		{"65 characters", strings.Repeat("k", 65)},
		{"NUL", "a\x00b"},
		{"tab", "a\tb"},
		{"newline", "a\nb"},
		{"DEL", "a\x7fb"},
		{"non-ASCII", "café"},
		{"replacement character", "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := wantCode(t, s.do(t, user, keyedGrab, map[string]any{"id": v.ID, "key": tc.key}, nil), "BAD_USER_INPUT")
			if !strings.Contains(e.Message, "requestId") {
				t.Fatalf("message %q does not name requestId", e.Message)
			}
		})
	}
	if rows := s.orderRows(t, v.ID); len(rows) != 0 {
		t.Fatalf("refused grabs made orders %v", rows)
	}
	if left, _ := s.rdb.Get(t.Context(), "{v"+v.ID+"}:stock").Int(); left != 5 {
		t.Fatalf("refused grabs took stock: %d left of 5", left)
	}
	t.Run("64 printable characters, spaces and punctuation included, buy", func(t *testing.T) {
		key := strings.Repeat("~ !", 20) + "Az09"
		orderOf(t, s.keyedGrab(t, 9, v.ID, key))
	})
}

// A grab whose reply was lost after Redis sold it is answered UNAVAILABLE;
// the client's retry with the same key gets that very order.
func TestARetryAfterALostReplyGetsTheOriginalOrder(t *testing.T) {
	t.Parallel()
	s, grabs := newStallingServer(t, actors.Options{CallTimeout: 200 * time.Millisecond, Attempts: 2, GrabTimeout: 2 * time.Second})
	v := s.createVoucher(t, seckillInput(1, 5))
	orderOf(t, s.keyedGrab(t, 2, v.ID, "")) // the voucher's actor is up

	grabs.Proxy.Stall()
	if got := s.keyedGrab(t, 1, v.ID, "buy-1"); got.Code != "UNAVAILABLE" {
		t.Fatalf("grab while redis stalled: %s, want UNAVAILABLE", got.Code)
	}
	if sold, _ := s.rdb.HLen(t.Context(), "{v"+v.ID+"}:req").Result(); sold != 2 {
		t.Fatalf("redis sold %d grabs, want 2: the stalled one sold and only its reply was lost", sold)
	}
	grabs.Proxy.Resume()

	again := orderOf(t, s.keyedGrab(t, 1, v.ID, "buy-1"))
	if rows := s.orderRows(t, v.ID); len(rows) != 2 || rows[again] != 1 {
		t.Fatalf("orders in the database %v, want one of user 2 and the retry's %s of user 1", rows, again)
	}
}

// One order per request id holds for a key sent many times at once, as a
// client retrying on a timeout while its first grab still queues does:
// the copies land in the same batch or in batches one after another.
// Every OK for a key names the same order, the database holds exactly one
// order per key, and the stock fell by exactly the number of keys, though
// the user's limit would allow every copy to buy.
func TestARequestIDSentManyTimesAtOnceSellsOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	const keys, copies, stock = 12, 6, 100
	in := seckillInput(1, stock)
	in["perUserLimit"] = keys * copies
	v := s.createVoucher(t, in)
	const user = 42
	orders := make([][]string, keys) // per key, the order of every OK
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("retry-%d", k)
		for range copies {
			wg.Go(func() {
				got := s.keyedGrab(t, user, v.ID, key)
				if got.Code != "OK" || got.OrderID == nil {
					t.Errorf("key %s answered %s, want OK", key, got.Code)
					return
				}
				mu.Lock()
				orders[k] = append(orders[k], *got.OrderID)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	rows := s.orderRows(t, v.ID)
	for k, got := range orders {
		for _, id := range got {
			if id != got[0] {
				t.Errorf("key retry-%d answered two orders: %v", k, got)
				break
			}
		}
	}
	if len(rows) != keys {
		t.Errorf("%d orders in the database for %d keys: %v", len(rows), keys, rows)
	}
	if left, _ := s.rdb.Get(t.Context(), "{v"+v.ID+"}:stock").Int(); left != stock-keys {
		t.Errorf("%d units left of %d after %d keys sold, want %d", left, stock, keys, stock-keys)
	}
}
