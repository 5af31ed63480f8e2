package graph_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/auth"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

const deadLetteredOrders = `query($v: ID, $first: Int, $after: String) {
  deadLetteredOrders(voucherId: $v, first: $first, after: $after) {
    edges { cursor node { key orderId userId voucherId reason detail at } }
    pageInfo { hasNextPage endCursor }
  }
}`

type deadLetterPage struct {
	DeadLetteredOrders struct {
		Edges []struct {
			Cursor string
			Node   struct {
				Key, OrderID, UserID, VoucherID, Reason, Detail string
				At                                              time.Time
			}
		}
		PageInfo struct {
			HasNextPage bool
			EndCursor   *string
		}
	}
}

// An order Redis accepted and the database refused (here: a second live
// order of a user at limit 1, as Redis could only sell after losing its
// data) is listed for an admin with its reason, page by page; nobody else
// may see the list, and a forged cursor is bad input.
func TestAdminListsDeadLetteredOrders(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 5))
	vid, _ := strconv.ParseInt(v.ID, 10, 64)
	user := s.token(t, 42, auth.RoleUser)
	var res struct {
		SeckillVoucher struct{ Code, OrderID string }
	}
	s.mustDo(t, user, `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code orderId } }`, map[string]any{"v": v.ID}, &res)
	if res.SeckillVoucher.Code != "OK" {
		t.Fatalf("grab: %+v", res)
	}
	testenv.Drained(t, s.writer, time.Minute)
	for i := range 3 { // impossible orders: user 42 holds one already
		err := s.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: persistence.LogKey(vid), Values: []any{
			persistence.EntryOrderID, 9_000_000 + i, persistence.EntryUserID, 42, persistence.EntryVoucherID, vid,
			persistence.EntryTime, time.Now().UnixMilli(), persistence.EntrySlot, 1,
		}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	testenv.Drained(t, s.writer, time.Minute)

	var seen []string
	var after *string
	for page := 0; ; page++ {
		var out deadLetterPage
		vars := map[string]any{"v": v.ID, "first": 2}
		if after != nil {
			vars["after"] = *after
		}
		s.mustDo(t, s.admin(t), deadLetteredOrders, vars, &out)
		for _, e := range out.DeadLetteredOrders.Edges {
			n := e.Node
			if n.Reason != persistence.DeadOverUserLimit || n.UserID != "42" || n.VoucherID != v.ID || n.Detail == "" || n.At.IsZero() {
				t.Fatalf("dead letter %+v", n)
			}
			seen = append(seen, n.OrderID)
		}
		if !out.DeadLetteredOrders.PageInfo.HasNextPage {
			break
		}
		after = out.DeadLetteredOrders.PageInfo.EndCursor
		if page > 3 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != 3 {
		t.Fatalf("listed %v, want the 3 refused orders", seen)
	}

	wantCode(t, s.do(t, user, deadLetteredOrders, nil, nil), "FORBIDDEN")
	wantCode(t, s.do(t, "", deadLetteredOrders, nil, nil), "UNAUTHENTICATED")
	wantCode(t, s.do(t, s.admin(t), deadLetteredOrders, map[string]any{"after": "bm90LWEtY3Vyc29y"}, nil), "BAD_USER_INPUT")
	wantCode(t, s.do(t, s.admin(t), deadLetteredOrders, map[string]any{"first": 1000}, nil), "BAD_USER_INPUT")
}

const reconciliation = `query($v: ID!) {
  reconciliation(voucherId: $v) { voucherId initialStock remaining loaded liveOrders inFlightOrders deadLetteredOrders usersOff balanced }
}`

// An admin reads a voucher's stock identity after a sale: balanced, with
// every term; users may not, and an unknown voucher is NOT_FOUND.
func TestAdminReadsAVouchersReconciliation(t *testing.T) {
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 5))
	for u := int64(100); u < 103; u++ {
		var res struct{ SeckillVoucher struct{ Code string } }
		s.mustDo(t, s.token(t, u, auth.RoleUser), `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }`, map[string]any{"v": v.ID}, &res)
		if res.SeckillVoucher.Code != "OK" {
			t.Fatalf("grab: %+v", res)
		}
	}
	testenv.Drained(t, s.writer, time.Minute)
	var out struct {
		Reconciliation struct {
			VoucherID                                                               string
			InitialStock, Remaining, LiveOrders, InFlightOrders, DeadLetteredOrders int
			UsersOff                                                                int
			Loaded, Balanced                                                        bool
		}
	}
	s.mustDo(t, s.admin(t), reconciliation, map[string]any{"v": v.ID}, &out)
	r := out.Reconciliation
	if !r.Balanced || !r.Loaded || r.VoucherID != v.ID || r.InitialStock != 5 || r.Remaining != 2 || r.LiveOrders != 3 ||
		r.InFlightOrders != 0 || r.DeadLetteredOrders != 0 || r.UsersOff != 0 {
		t.Fatalf("reconciliation %+v", r)
	}
	wantCode(t, s.do(t, s.token(t, 100, auth.RoleUser), reconciliation, map[string]any{"v": v.ID}, nil), "FORBIDDEN")
	wantCode(t, s.do(t, s.admin(t), reconciliation, map[string]any{"v": "999999"}, nil), "NOT_FOUND")
}
