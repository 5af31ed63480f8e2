package graph_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"flashsale/internal/auth"
)

func TestAuthorizationIsPerOperation(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 10))
	user, admin := s.token(t, 7, auth.RoleUser), s.admin(t)
	createAs := `createVoucher(input: {shopId: "1", title: "t", payValue: 1, actualValue: 2, type: NORMAL}) { id }`
	grab := `seckillVoucher(voucherId: "` + v.ID + `") { code orderId }`
	stock := `stock(voucherId: "` + v.ID + `") { remaining }`

	cases := []struct {
		name, token, op, code string // code "" = success
	}{
		{"grab then admin field", user, `mutation { a: ` + grab + ` b: ` + createAs + ` }`, "FORBIDDEN"},
		{"admin field then grab", user, `mutation { b: ` + createAs + ` a: ` + grab + ` }`, "FORBIDDEN"},
		{"admin field in a fragment", user, `mutation { ...M } fragment M on Mutation { ` + grab + ` ` + createAs + ` }`, "FORBIDDEN"},
		{"admin field in an inline fragment", user, `mutation { ` + grab + ` ... on Mutation { ` + createAs + ` } }`, "FORBIDDEN"},
		{"no token on a grab", "", `mutation { ` + grab + ` }`, "UNAUTHENTICATED"},
		{"no token on a query", "", `{ ` + stock + ` }`, "UNAUTHENTICATED"},
		{"bad token on a query", "junk", `{ ` + stock + ` }`, "UNAUTHENTICATED"},
		{"no token, introspection beside a field", "", `{ __typename ` + stock + ` }`, "UNAUTHENTICATED"},
		{"no token, field behind a fragment", "", `{ __typename ...Q } fragment Q on Query { ` + stock + ` }`, "UNAUTHENTICATED"},
		{"no token, typename only", "", `{ __typename }`, ""},
		{"no token, __type only", "", `{ __type(name: "Query") { name } a: __typename }`, ""},
		{"bad token, introspection only", "junk", `{ __schema { queryType { name } } }`, ""},
		{"admin may do both", admin, `mutation { ` + createAs + ` ` + grab + ` }`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.send(t, http.MethodPost, "/query", "application/json", jsonBody(t, tc.op), tc.token)
			if tc.code == "" {
				if len(r.Errors) > 0 {
					t.Fatalf("want success, got %s", r.body)
				}
				return
			}
			e := wantCode(t, r.Errors, tc.code)
			if len(e.Path) > 0 || (len(r.Data) > 0 && string(r.Data) != "null") {
				t.Fatalf("the operation ran: %s", r.body)
			}
		})
	}

	t.Run("rejected operations changed nothing", func(t *testing.T) {
		var out struct{ Stock struct{ Remaining int } }
		s.mustDo(t, admin, `{ `+stock+` }`, nil, &out)
		if out.Stock.Remaining != 9 { // 10, less the admin's one grab
			t.Fatalf("remaining %d, want 9", out.Stock.Remaining)
		}
	})
}

func TestOneGrabPerOperation(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 10))
	user := s.token(t, 7, auth.RoleUser)
	grab := `seckillVoucher(voucherId: "` + v.ID + `") { code orderId }`
	for _, tc := range []struct{ name, op string }{
		{"two aliases", `mutation { a: ` + grab + ` b: ` + grab + ` }`},
		{"alias beside the plain field", `mutation { ` + grab + ` b: ` + grab + ` }`},
		{"second grab in a fragment", `mutation { a: ` + grab + ` ...G } fragment G on Mutation { b: ` + grab + ` }`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.send(t, http.MethodPost, "/query", "application/json", jsonBody(t, tc.op), user)
			e := wantCode(t, r.Errors, "BAD_USER_INPUT")
			if len(r.Data) > 0 && string(r.Data) != "null" {
				t.Fatalf("the operation ran: %s (%s)", r.body, e.Message)
			}
		})
	}
	t.Run("a repeated field is one grab", func(t *testing.T) {
		// Same response key: GraphQL merges the two into one execution.
		var out struct{ SeckillVoucher struct{ Code string } }
		s.mustDo(t, user, `mutation { `+grab+` seckillVoucher(voucherId: "`+v.ID+`") { message } }`, nil, &out)
		if out.SeckillVoucher.Code != "OK" {
			t.Fatalf("code %s", out.SeckillVoucher.Code)
		}
	})
	t.Run("only that grab took stock", func(t *testing.T) {
		var out struct{ Stock struct{ Remaining int } }
		s.mustDo(t, user, `{ stock(voucherId: "`+v.ID+`") { remaining } }`, nil, &out)
		if out.Stock.Remaining != 9 {
			t.Fatalf("remaining %d, want 9", out.Stock.Remaining)
		}
	})
}

func jsonBody(tb testing.TB, query string) string {
	tb.Helper()
	b, err := json.Marshal(map[string]any{"query": query})
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}
