package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

// answer is one POST /query's answer: its status, Retry-After, errors and
// extensions.cost.
type answer struct {
	status     int
	retryAfter string
	errs       []nodetest.Error
	cost       *httpapi.CostReport
	data       json.RawMessage
}

// ask posts query from ip (with token when not empty) to h.
func ask(tb testing.TB, h http.Handler, ip, token, query string) answer {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, postRequest(ip, token, map[string]any{"query": query}))
	var resp struct {
		Data       json.RawMessage
		Errors     []nodetest.Error
		Extensions struct{ Cost *httpapi.CostReport }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		tb.Fatalf("%v: %.300s", err, rec.Body.String())
	}
	return answer{status: rec.Code, retryAfter: rec.Header().Get("Retry-After"), errs: resp.Errors, cost: resp.Extensions.Cost, data: resp.Data}
}

// budgetNodes starts two nodes over one database and one Redis, with a
// budget of 1,000 points per caller that comes back one point a second,
// and requests of at most 500; b answers every grab through gqlgen (no
// compiled path).
func budgetNodes(tb testing.TB) (a, b *nodetest.Node) {
	tb.Helper()
	env := map[string]string{"COST_BUDGET": "1000", "COST_RESTORE_PER_SEC": "1", "MAX_REQUEST_COST": "500"}
	a = startNode(tb, env, node.Hooks{})
	env["GRAPHQL_COMPILED_GRABS"] = "false"
	b = nodetest.Start(tb, nodetest.Options{DatabaseURL: a.DatabaseURL, Redis: a.Redis, Env: env, Hooks: node.Hooks{Actors: nodetest.Patient}})
	return a, b
}

// Each request is charged its price before it runs, given back what its
// answer did not use, and told both and what is left in extensions.cost;
// a request the budget cannot pay is refused RATE_LIMITED with
// retryAfterMs, on every node (the budget lives in Redis), and asked again
// meanwhile it is refused 429 before it is read. Grabs are never charged
// nor refused for it, and another user's budget is untouched.
func TestEachRequestIsChargedToItsCallersBudget(t *testing.T) {
	t.Parallel()
	a, b := budgetNodes(t)
	for i := range 30 {
		testenv.MustVoucher(t, a.DB, a.Redis.Client(), testenv.VoucherSpec{Stock: 5})
		_ = i
	}
	v := testenv.MustVoucher(t, a.DB, a.Redis.Client(), testenv.VoucherSpec{Stock: 5})
	user, other := a.Token(t, 2, auth.RoleUser), a.Token(t, 3, auth.RoleUser)

	// 31 vouchers: a page of 31 selects 2 fields an item.
	page := "{ vouchers(first: 35) { edges { node { id } } } }"
	want := graph.RequestPoints + 1 + 35*(3+graph.RowPoints)
	actual := graph.RequestPoints + 1 + 1 + 31*(2+graph.RowPoints)
	got := ask(t, a.GraphQL, "192.0.2.1", user, page)
	if len(got.errs) > 0 || got.cost == nil {
		t.Fatalf("first page: %+v, cost %+v", got.errs, got.cost)
	}
	if c := *got.cost; c.Requested != want || c.Actual != actual || c.Capacity != 1000 || c.RestoreRate != 1 ||
		c.Remaining < 1000-actual || c.Remaining > 1000-actual+5 {
		t.Fatalf("cost %+v; want requested %d, actual %d, about %d remaining of 1000, 1 a second", c, want, actual, 1000-actual)
	}
	spent := 1000 - got.cost.Remaining
	// The same on the other node draws on the same budget.
	got = ask(t, b.GraphQL, "192.0.2.1", user, page)
	if len(got.errs) > 0 {
		t.Fatalf("page within the budget refused: %+v", got.errs)
	}
	spent += actual
	if got.cost.Remaining > 1000-spent+5 {
		t.Fatalf("%d remaining after %d spent on two nodes", got.cost.Remaining, spent)
	}
	// 1000 - 2*399 < 481: the third is refused, for a while.
	got = ask(t, b.GraphQL, "192.0.2.1", user, page)
	e := nodetest.WantCode(t, got.errs, "RATE_LIMITED")
	if ms, _ := e.Extensions["retryAfterMs"].(float64); ms < 60_000 {
		t.Fatalf("retryAfterMs %v, want the minutes a point a second takes to pay %d", e.Extensions["retryAfterMs"], want)
	}
	// Asked again, refused before it is read: 429 with Retry-After.
	got = ask(t, b.GraphQL, "192.0.2.1", user, page)
	if got.status != http.StatusTooManyRequests || got.retryAfter == "" {
		t.Fatalf("refused again: status %d, Retry-After %q; want 429 with Retry-After", got.status, got.retryAfter)
	}
	nodetest.WantCode(t, got.errs, "RATE_LIMITED")

	// The grab goes through, on the compiled path (a) and through gqlgen
	// (b): grabs draw on their own limits.
	grab := fmt.Sprintf(`mutation { seckillVoucher(voucherId: "%d") { code } }`, v.ID)
	for _, n := range []*nodetest.Node{a, b} {
		got = ask(t, n.GraphQL, "192.0.2.1", user, grab)
		if len(got.errs) > 0 {
			t.Fatalf("a grab refused for the reads' budget: %+v", got.errs)
		}
	}
	// Another user has a budget of their own.
	if got = ask(t, b.GraphQL, "192.0.2.1", other, page); len(got.errs) > 0 {
		t.Fatalf("another user refused: %+v", got.errs)
	}
}

// Without a token, the budget is the address's, an IPv6 address's /64:
// every address of one /64 draws on one budget, and another /64 has its
// own.
func TestAnonymousCallersShareTheBudgetOfTheir64(t *testing.T) {
	t.Parallel()
	n := startNode(t, map[string]string{"COST_BUDGET": "60", "COST_RESTORE_PER_SEC": "1", "MAX_REQUEST_COST": "60"}, node.Hooks{})
	q := "{ __schema { queryType { name } mutationType { name } subscriptionType { name } } }"
	first := ask(t, n.GraphQL, "2001:db8:1:1::1", "", q)
	if len(first.errs) > 0 || first.cost == nil {
		t.Fatalf("%+v, cost %+v", first.errs, first.cost)
	}
	price := first.cost.Actual
	admitted := 1
	for i := 2; ; i++ {
		got := ask(t, n.GraphQL, "2001:db8:1:1::"+strconv.FormatInt(int64(i), 16), "", q)
		if len(got.errs) > 0 {
			nodetest.WantCode(t, got.errs, "RATE_LIMITED")
			break
		}
		admitted++
		if admitted > 60 {
			t.Fatal("60 requests of one /64 admitted on a budget of 60 points")
		}
	}
	if admitted > 60/price+1 {
		t.Fatalf("%d requests of %d points each admitted from one /64 on a budget of 60", admitted, price)
	}
	if got := ask(t, n.GraphQL, "2001:db8:1:2::1", "", q); len(got.errs) > 0 {
		t.Fatalf("another /64 refused: %+v", got.errs)
	}
	if got := ask(t, n.GraphQL, "192.0.2.9", "", q); len(got.errs) > 0 {
		t.Fatalf("an IPv4 address refused: %+v", got.errs)
	}
}

// The request cost's units are the same before and after: a page that
// came back full is charged what it was priced, and a voucher's text
// costs its bytes.
func TestActualCostCountsFieldsRowsAndTexts(t *testing.T) {
	t.Parallel()
	n := startNode(t, map[string]string{"COST_BUDGET": "100000", "COST_RESTORE_PER_SEC": "1"}, node.Hooks{})
	admin := n.Token(t, 1, auth.RoleAdmin)
	rules := string(bytes.Repeat([]byte("r"), 3*graph.TextBytesPerPoint))
	got := ask(t, n.GraphQL, "192.0.2.1", admin, fmt.Sprintf(`mutation { createVoucher(input: {shopId: "7", title: "t", rules: %q, payValue: 1, actualValue: 2, type: NORMAL}) { id } }`, rules))
	if len(got.errs) > 0 {
		t.Fatal(got.errs)
	}
	got = ask(t, n.GraphQL, "192.0.2.1", admin, "{ vouchers(first: 1) { edges { node { rules } } } }")
	if len(got.errs) > 0 || got.cost == nil {
		t.Fatalf("%+v, cost %+v", got.errs, got.cost)
	}
	// The request; vouchers, edges, node: 3; rules: 1 + 3; the row.
	want := graph.RequestPoints + 3 + 4 + graph.RowPoints
	priced := graph.RequestPoints + 1 + 1*(1+1+4+graph.RowPoints)
	if got.cost.Actual != want || got.cost.Requested != priced {
		t.Fatalf("cost %+v; want actual %d and requested %d", *got.cost, want, priced)
	}
}

// A request answered before it has an operation (no query) is answered
// as without a budget: 400, never an internal error.
func TestRequestsWithoutAnOperationAreAnsweredWithTheBudgetOn(t *testing.T) {
	t.Parallel()
	n := startNode(t, map[string]string{"COST_BUDGET": "25000"}, node.Hooks{})
	for _, tok := range []string{"", n.Token(t, 2, auth.RoleUser)} {
		rec := httptest.NewRecorder()
		req := postRequest("192.0.2.1", tok, map[string]any{})
		req.Header.Set("Accept", "application/json")
		n.GraphQL.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("no query (token %v): %d %s, want 400", tok != "", rec.Code, rec.Body.String())
		}
	}
}

// Documents refused before they are priced (they do not validate, or
// admission's shape limits refuse them) are charged by their size: a caller who sends wrong documents of 10 KB
// (RequestPoints and one point a 128 bytes, about 105 each) empties a
// budget of 1,000 within ten, and is then refused from memory, 429, a
// right document too; another user is not.
func TestWrongDocumentsAreChargedByTheirSize(t *testing.T) {
	t.Parallel()
	a, _ := budgetNodes(t)
	user, other := a.Token(t, 4, auth.RoleUser), a.Token(t, 5, auth.RoleUser)
	var wrong strings.Builder // ten unknown fields of 1,000 characters
	wrong.WriteString("{")
	for i := range 10 {
		fmt.Fprintf(&wrong, " f%d%s", i, strings.Repeat("x", 998))
	}
	wrong.WriteString(" }")
	refused := -1
	for i := range 12 {
		got := ask(t, a.GraphQL, "192.0.2.1", user, wrong.String())
		if got.status == http.StatusTooManyRequests {
			refused = i
			break
		}
		if len(got.errs) == 0 || got.errs[0].Code() != "BAD_USER_INPUT" {
			t.Fatalf("wrong document %d: %d %+v, want BAD_USER_INPUT", i, got.status, got.errs)
		}
	}
	if refused < 8 || refused > 10 {
		t.Fatalf("refused at the wrong document %d; want the 9th to 11th (1,000 points, about 105 each)", refused)
	}
	if got := ask(t, a.GraphQL, "192.0.2.1", user, "{ serverTime }"); got.status != http.StatusTooManyRequests {
		t.Fatalf("a right document after the wrong ones: %d %+v, want 429", got.status, got.errs)
	}
	if got := ask(t, a.GraphQL, "192.0.2.1", other, "{ serverTime }"); len(got.errs) > 0 {
		t.Fatalf("another user: %+v", got.errs)
	}
	// A document admission refuses before the executor sees it (over 100
	// fields, 60 KB: about 505 points) is charged alike: the third is
	// refused.
	var wide strings.Builder
	wide.WriteString("{")
	for j := 0; wide.Len() < 60<<10; j++ {
		fmt.Fprintf(&wide, " f%d_%s", j, strings.Repeat("q", 600))
	}
	wide.WriteString(" }")
	for i := range 3 {
		got := ask(t, a.GraphQL, "192.0.2.1", other, wide.String())
		if refusedNow := got.status == http.StatusTooManyRequests; refusedNow != (i == 2) {
			t.Fatalf("60 KB document %d: %d %+v; want the third refused with 429", i, got.status, got.errs)
		}
	}
}

// An introspection operation is charged by the fields of its answer (a
// point per graph.IntrospectionFieldsPerPoint), not by gqlgen's
// complexity, which counts `types` and `fields` once however many the
// schema has: so aliases of `__schema` cannot cost a user next to nothing.
func TestIntrospectionIsChargedByTheFieldsOfItsAnswer(t *testing.T) {
	t.Parallel()
	a, _ := budgetNodes(t)
	user := a.Token(t, 6, auth.RoleUser)
	got := ask(t, a.GraphQL, "192.0.2.1", user, "{ __schema { types { name fields { name } } } }")
	if len(got.errs) > 0 || got.cost == nil {
		t.Fatalf("introspection: %+v, cost %+v", got.errs, got.cost)
	}
	var answer struct {
		Schema struct {
			Types []struct {
				Fields []struct{} `json:"fields"`
			} `json:"types"`
		} `json:"__schema"`
	}
	if err := json.Unmarshal(got.data, &answer); err != nil {
		t.Fatal(err)
	}
	fields := 2 // __schema, types
	for _, ty := range answer.Schema.Types {
		fields += 2 + len(ty.Fields) // name, fields, and each field's name
	}
	if want := graph.RequestPoints + fields/graph.IntrospectionFieldsPerPoint; got.cost.Requested < want-5 || got.cost.Requested > want+5 {
		t.Fatalf("introspection of %d fields charged %+v; want about %d requested", fields, *got.cost, want)
	}
}
