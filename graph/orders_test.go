package graph_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

const (
	orderQuery   = `query($id: ID!) { order(id: $id) { id userId status payDeadline } }`
	myOrders     = `query($first: Int, $after: String) { myOrders(first: $first, after: $after) { edges { cursor node { id status } } pageInfo { hasNextPage endCursor } } }`
	payMutation  = `mutation($id: ID!) { payOrder(orderId: $id) { id status paidAt } }`
	cancelMut    = `mutation($id: ID!) { cancelOrder(orderId: $id) { id status cancelledAt } }`
	addStockMut  = `mutation($v: ID!, $n: Int!, $k: String) { addStock(voucherId: $v, amount: $n, requestId: $k) { remaining } }`
	reconcileQry = `query($v: ID, $r: Boolean) { reconcile(voucherId: $v, repair: $r) { voucherId balanced drift lines } }`
)

// Who may read and change an order, restock and reconcile: the owner, any
// other user, an admin, and a caller without a token.
func TestOrderFieldsAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 10, Limit: 3})
	const ownerID, otherID = 7, 8
	var ids []string
	for range 3 {
		res := s.router.Grab(ctx, domain.GrabRequest{VoucherID: v.ID, UserID: ownerID})
		if res.Code != domain.SeckillOK {
			t.Fatalf("grab: %s", res.Code)
		}
		ids = append(ids, strconv.FormatInt(res.OrderID, 10))
	}
	testenv.Drained(t, s.writer, time.Minute)
	owner, other, admin := s.token(t, ownerID, auth.RoleUser), s.token(t, otherID, auth.RoleUser), s.admin(t)
	vid := strconv.FormatInt(v.ID, 10)

	cases := []struct {
		name, token, query string
		vars               map[string]any
		code               string // "" = allowed
	}{
		{"owner reads order", owner, orderQuery, map[string]any{"id": ids[0]}, ""},
		{"other user reads order", other, orderQuery, map[string]any{"id": ids[0]}, "NOT_FOUND"},
		{"admin reads order", admin, orderQuery, map[string]any{"id": ids[0]}, ""},
		{"anonymous reads order", "", orderQuery, map[string]any{"id": ids[0]}, "UNAUTHENTICATED"},
		{"unknown order", owner, orderQuery, map[string]any{"id": "123456789"}, "NOT_FOUND"},
		{"owner lists orders", owner, myOrders, nil, ""},
		{"anonymous lists orders", "", myOrders, nil, "UNAUTHENTICATED"},
		{"other user pays", other, payMutation, map[string]any{"id": ids[0]}, "NOT_FOUND"},
		{"admin pays", admin, payMutation, map[string]any{"id": ids[0]}, "NOT_FOUND"},
		{"anonymous pays", "", payMutation, map[string]any{"id": ids[0]}, "UNAUTHENTICATED"},
		{"owner pays", owner, payMutation, map[string]any{"id": ids[0]}, ""},
		{"owner pays again", owner, payMutation, map[string]any{"id": ids[0]}, ""},
		{"owner cancels a paid order", owner, cancelMut, map[string]any{"id": ids[0]}, "BAD_USER_INPUT"},
		{"other user cancels", other, cancelMut, map[string]any{"id": ids[1]}, "NOT_FOUND"},
		{"admin cancels", admin, cancelMut, map[string]any{"id": ids[1]}, "NOT_FOUND"},
		{"anonymous cancels", "", cancelMut, map[string]any{"id": ids[1]}, "UNAUTHENTICATED"},
		{"owner cancels", owner, cancelMut, map[string]any{"id": ids[1]}, ""},
		{"owner cancels again", owner, cancelMut, map[string]any{"id": ids[1]}, ""},
		{"owner pays a cancelled order", owner, payMutation, map[string]any{"id": ids[1]}, "BAD_USER_INPUT"},
		{"owner restocks", owner, addStockMut, map[string]any{"v": vid, "n": 1}, "FORBIDDEN"},
		{"other user restocks", other, addStockMut, map[string]any{"v": vid, "n": 1}, "FORBIDDEN"},
		{"anonymous restocks", "", addStockMut, map[string]any{"v": vid, "n": 1}, "UNAUTHENTICATED"},
		{"admin restocks", admin, addStockMut, map[string]any{"v": vid, "n": 1, "k": "r1"}, ""},
		{"admin restocks zero", admin, addStockMut, map[string]any{"v": vid, "n": 0}, "BAD_USER_INPUT"},
		{"admin restocks too much", admin, addStockMut, map[string]any{"v": vid, "n": domain.MaxRestock + 1}, "BAD_USER_INPUT"},
		{"admin restocks unknown voucher", admin, addStockMut, map[string]any{"v": "99999", "n": 1}, "NOT_FOUND"},
		{"owner reconciles", owner, reconcileQry, map[string]any{"v": vid}, "FORBIDDEN"},
		{"other user reconciles", other, reconcileQry, map[string]any{"v": vid}, "FORBIDDEN"},
		{"anonymous reconciles", "", reconcileQry, map[string]any{"v": vid}, "UNAUTHENTICATED"},
		{"admin reconciles", admin, reconcileQry, map[string]any{"v": vid}, ""},
		{"admin reconciles all", admin, reconcileQry, nil, ""},
	}
	for _, tc := range cases {
		// Sequential: later cases depend on earlier payments and cancellations.
		errs := s.do(t, tc.token, tc.query, tc.vars, nil)
		if tc.code == "" {
			if len(errs) > 0 {
				t.Errorf("%s: unexpected errors %+v", tc.name, errs)
			}
			continue
		}
		if len(errs) != 1 || errs[0].code() != tc.code {
			t.Errorf("%s: want one %s error, got %+v", tc.name, tc.code, errs)
		}
	}

	// What the allowed calls answered.
	var got struct {
		Order struct {
			ID, UserID, Status string
			PayDeadline        time.Time
		}
	}
	s.mustDo(t, admin, orderQuery, map[string]any{"id": ids[2]}, &got)
	if got.Order.UserID != strconv.Itoa(ownerID) || got.Order.Status != "UNPAID" || got.Order.PayDeadline.IsZero() {
		t.Errorf("admin's view of the order: %+v", got.Order)
	}
	var rec struct {
		Reconcile []struct {
			Balanced bool
			Lines    []string
		}
	}
	s.mustDo(t, admin, reconcileQry, map[string]any{"v": vid}, &rec)
	if len(rec.Reconcile) != 1 || !rec.Reconcile[0].Balanced {
		t.Errorf("reconcile: %+v", rec.Reconcile)
	}
}

// myOrders pages the caller's own orders newest first with the list
// cursors; another user sees none of them.
func TestMyOrdersPagesNewestFirst(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 10, Limit: 3})
	var ids []string
	for range 3 {
		res := s.router.Grab(ctx, domain.GrabRequest{VoucherID: v.ID, UserID: 7})
		if res.Code != domain.SeckillOK {
			t.Fatalf("grab: %s", res.Code)
		}
		ids = append(ids, strconv.FormatInt(res.OrderID, 10))
	}
	testenv.Drained(t, s.writer, time.Minute)
	type page struct {
		MyOrders struct {
			Edges []struct {
				Cursor string
				Node   struct{ ID string }
			}
			PageInfo struct {
				HasNextPage bool
				EndCursor   *string
			}
		}
	}
	owner := s.token(t, 7, auth.RoleUser)
	var p1, p2, others page
	s.mustDo(t, owner, myOrders, map[string]any{"first": 2}, &p1)
	if e := p1.MyOrders.Edges; len(e) != 2 || e[0].Node.ID != ids[2] || e[1].Node.ID != ids[1] || !p1.MyOrders.PageInfo.HasNextPage {
		t.Fatalf("first page: %+v", p1)
	}
	s.mustDo(t, owner, myOrders, map[string]any{"first": 2, "after": *p1.MyOrders.PageInfo.EndCursor}, &p2)
	if e := p2.MyOrders.Edges; len(e) != 1 || e[0].Node.ID != ids[0] || p2.MyOrders.PageInfo.HasNextPage {
		t.Fatalf("second page: %+v", p2)
	}
	s.mustDo(t, s.token(t, 8, auth.RoleUser), myOrders, nil, &others)
	if len(others.MyOrders.Edges) != 0 {
		t.Fatalf("another user sees %+v", others)
	}
	wantCode(t, s.do(t, owner, myOrders, map[string]any{"after": "bogus"}, nil), "BAD_USER_INPUT")
}
