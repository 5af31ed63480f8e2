package graph_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/persistence"
)

// aliases repeats one root field under n aliases.
func aliases(n int, field string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, " a%d: %s", i, field)
	}
	b.WriteString(" }")
	return b.String()
}

// allocatedBy is the bytes allocated while one request is served: the
// least of a few runs, so that a background goroutine's allocation in one
// run does not count. Each run's query differs (a comment) so that none
// is answered from the query cache.
func allocatedBy(tb testing.TB, h http.Handler, token, query string) uint64 {
	tb.Helper()
	least := ^uint64(0)
	for i := range 5 {
		body := fmt.Sprintf(`{"query":%q}`, fmt.Sprintf("# run %d\n%s", i, query))
		req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		h.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		if !strings.Contains(rec.Body.String(), "COMPLEXITY_LIMIT_EXCEEDED") {
			tb.Fatalf("not refused for its cost: %d %.300s", rec.Code, rec.Body.String())
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// Not parallel: it measures the process's allocation while it runs.
func TestListsCostTheirPageSize(t *testing.T) {
	s := newServer(t)
	s.node.WithLongTexts(t, 100)
	user := s.token(t, 2, auth.RoleUser)

	// 100 aliases of a full page of long texts: a 63 MB answer if served.
	hostile := aliases(100, "vouchers(first: 100) { edges { node { subTitle rules } } }")
	n := allocatedBy(t, s.handler, user, hostile)
	t.Logf("refusing 100 aliased full pages allocated %d bytes", n)
	if n > 1<<20 {
		t.Fatalf("refusing 100 aliased full pages allocated %d bytes, want at most 1 MiB", n)
	}

	allFields := "edges { cursor node { id shopId title payValue actualValue type status createdAt seckill { initialStock remaining beginAt endAt perUserLimit } } } pageInfo { hasNextPage endCursor }"
	for _, tc := range []struct {
		name, query string
		vars        map[string]any
		refused     bool
	}{
		{"100 aliased full pages are refused", hostile, nil, true},
		{"a page of 80 with every short field is served", "{ vouchers(first: 80) { " + allFields + " } }", nil, false},
		{"a page of 100 with every short field is refused", "{ vouchers(first: 100) { " + allFields + " } }", nil, true},
		{"a page of 100 long texts is refused", "{ vouchers(first: 100) { edges { node { rules } } } }", nil, true},
		{"a page of 10 long texts is served", "{ vouchers(first: 10) { edges { node { subTitle rules } } } }", nil, false},
		{"two default pages are served", aliases(2, "vouchers { edges { node { id title } } }"), nil, false},
		{"a default page costs 20 items", aliases(12, "vouchers { edges { node { id title } } }"), nil, true},
		{"orders pages cost theirs too", aliases(2, "myOrders(first: 100) { edges { node { id userId voucherId status createdAt paidAt cancelledAt payDeadline } } }"), nil, true},
		{"a page size from a variable counts", "query($n: Int) {" + strings.TrimPrefix(aliases(4, "vouchers(first: $n) { edges { node { id title } } }"), "{"), map[string]any{"n": 100}, true},
		{"the same with small pages is served", "query($n: Int) {" + strings.TrimPrefix(aliases(4, "vouchers(first: $n) { edges { node { id title } } }"), "{"), map[string]any{"n": 5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := s.do(t, user, tc.query, tc.vars, nil)
			if !tc.refused {
				if len(errs) > 0 {
					t.Fatalf("refused: %+v", errs)
				}
				return
			}
			e := wantCode(t, errs, "BAD_USER_INPUT")
			if e.Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
				t.Fatalf("reason %v (%s), want COMPLEXITY_LIMIT_EXCEEDED", e.Extensions["reason"], e.Message)
			}
		})
	}
}

// Texts are priced by the longest stored, known before the page is read:
// a page of texts is cheap while they are short and refused once a long
// one is stored, at once on the node that stored it.
func TestTextsCostWhatTheLongestStoredTakes(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	admin, user := s.token(t, 1, auth.RoleAdmin), s.token(t, 2, auth.RoleUser)
	create := `mutation($r: String) { createVoucher(input: {shopId: "7", title: "t", rules: $r, payValue: 1, actualValue: 2, type: NORMAL}) { id } }`
	s.mustDo(t, admin, create, map[string]any{"r": "short rules"}, nil)
	page := "{ vouchers(first: 100) { edges { node { rules } } } }"
	s.mustDo(t, user, page, nil, nil)

	s.mustDo(t, admin, create, map[string]any{"r": strings.Repeat("r", domain.MaxTextLen)}, nil)
	e := wantCode(t, s.do(t, user, page, nil, nil), "BAD_USER_INPUT")
	if e.Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("reason %v (%s), want COMPLEXITY_LIMIT_EXCEEDED", e.Extensions["reason"], e.Message)
	}
	// Without the texts the same page is cheap, and read without them.
	s.mustDo(t, user, "{ vouchers(first: 100) { edges { node { id title } } } }", nil, nil)
}

// A page read without its texts (none selected) still answers them
// wherever a fragment selects them: inline, named, on the type or not.
func TestTextsSelectedInFragmentsAreRead(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	admin, user := s.token(t, 1, auth.RoleAdmin), s.token(t, 2, auth.RoleUser)
	s.mustDo(t, admin, `mutation { createVoucher(input: {shopId: "7", title: "t", subTitle: "sub", rules: "rules", payValue: 1, actualValue: 2, type: NORMAL}) { id } }`, nil, nil)
	for _, q := range []string{
		"{ vouchers { edges { node { rules subTitle } } } }",
		"{ vouchers { edges { node { ... on Voucher { rules subTitle } } } } }",
		"{ vouchers { edges { node { ... { rules subTitle } } } } }",
		"{ vouchers { edges { node { ...T } } } } fragment T on Voucher { rules subTitle }",
		"{ vouchers { ...C } } fragment C on VoucherConnection { edges { node { rules subTitle } } }",
	} {
		var out struct {
			Vouchers struct {
				Edges []struct {
					Node struct{ Rules, SubTitle *string }
				}
			}
		}
		s.mustDo(t, user, q, nil, &out)
		if len(out.Vouchers.Edges) != 1 {
			t.Fatalf("%s: %d vouchers", q, len(out.Vouchers.Edges))
		}
		if n := out.Vouchers.Edges[0].Node; n.Rules == nil || *n.Rules != "rules" || n.SubTitle == nil || *n.SubTitle != "sub" {
			t.Fatalf("%s: texts %v %v, want them read", q, n.Rules, n.SubTitle)
		}
	}
}

// Texts stored by another node since this one last read their sizes are
// priced short until it reads them again: the answer cap still refuses
// an answer past MAX_RESPONSE_BYTES, having stopped fetching.
func TestAnswersOverTheCapAreRefused(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	user := s.token(t, 2, auth.RoleUser)
	// Stored past this node's catalog, as another node would; four bytes
	// a character, the longest a text can be.
	text := strings.Repeat("\U0001F600", domain.MaxTextLen)
	store := persistence.NewVouchers(s.db)
	for i := range 100 {
		if _, err := store.Create(t.Context(), domain.NewVoucher{ShopID: 7, Title: fmt.Sprint("v", i), SubTitle: &text, Rules: &text,
			PayValue: 1, ActualValue: 2, Type: domain.VoucherNormal}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// Six pages of 25 long texts: priced as short (2106), 4.8 MB answered.
	e := wantCode(t, s.do(t, user, aliases(6, "vouchers(first: 25) { edges { node { subTitle rules } } }"), nil, nil), "BAD_USER_INPUT")
	if !strings.Contains(e.Message, "answer would exceed") {
		t.Fatalf("message %q", e.Message)
	}
	// Once the node has read the sizes, the same is refused for its cost.
	if err := s.catalog.RefreshTextSizes(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	e = wantCode(t, s.do(t, user, aliases(1, "vouchers(first: 100) { edges { node { subTitle rules } } }"), nil, nil), "BAD_USER_INPUT")
	if e.Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("reason %v (%s), want COMPLEXITY_LIMIT_EXCEEDED", e.Extensions["reason"], e.Message)
	}
}
