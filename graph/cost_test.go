package graph_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"flashsale/internal/auth"
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

	allFields := "edges { cursor node { id shopId title subTitle rules payValue actualValue type status createdAt seckill { initialStock remaining beginAt endAt perUserLimit } } } pageInfo { hasNextPage endCursor }"
	for _, tc := range []struct {
		name, query string
		vars        map[string]any
		refused     bool
	}{
		{"100 aliased full pages are refused", hostile, nil, true},
		{"a full page of every field is served", "{ vouchers(first: 100) { " + allFields + " } }", nil, false},
		{"twelve default pages are served", aliases(12, "vouchers { edges { node { id title subTitle rules } } }"), nil, false},
		{"a default page costs 20 items", aliases(42, "vouchers { edges { node { id title subTitle rules } } }"), nil, true},
		{"orders pages cost theirs too", aliases(5, "myOrders(first: 100) { edges { node { id userId voucherId status createdAt paidAt cancelledAt payDeadline } } }"), nil, true},
		{"a page size from a variable counts", "query($n: Int) {" + strings.TrimPrefix(aliases(20, "vouchers(first: $n) { edges { node { id title } } }"), "{"), map[string]any{"n": 100}, true},
		{"the same with small pages is served", "query($n: Int) {" + strings.TrimPrefix(aliases(20, "vouchers(first: $n) { edges { node { id title } } }"), "{"), map[string]any{"n": 5}, false},
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

func TestAnswersOverTheCapAreRefused(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.node.WithLongTexts(t, 100)
	user := s.token(t, 2, auth.RoleUser)

	// Six full pages of long texts cost little (2406) but answer 4.8 MB.
	query := aliases(6, "vouchers(first: 100) { edges { node { subTitle rules } } }")
	e := wantCode(t, s.do(t, user, query, nil, nil), "BAD_USER_INPUT")
	if !strings.Contains(e.Message, "answer would exceed") {
		t.Fatalf("message %q", e.Message)
	}
	// One page is well within the cap.
	s.mustDo(t, user, aliases(1, "vouchers(first: 100) { edges { node { subTitle rules } } }"), nil, nil)
}
