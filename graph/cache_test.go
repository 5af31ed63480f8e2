package graph_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"flashsale/internal/auth"
)

// postAPQ registers (or, with an empty query, names) a persisted query.
func postAPQ(tb testing.TB, h http.Handler, token, hash, query string) []gqlError {
	tb.Helper()
	body := map[string]any{"extensions": map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hash}}}
	if query != "" {
		body["query"] = query
	}
	b, _ := json.Marshal(body)
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var resp struct{ Errors []gqlError }
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		tb.Fatalf("%v: %.200s", err, rec.Body.String())
	}
	return resp.Errors
}

func sha(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }

func cacheBytes(tb testing.TB, name string) float64 {
	tb.Helper()
	return metricValue(tb, "flashsale_graphql_cache_bytes", map[string]string{"cache": name})
}

func cacheMisses(tb testing.TB, name string) float64 {
	tb.Helper()
	return metricValue(tb, "flashsale_graphql_cache_lookups_total", map[string]string{"cache": name, "result": "miss"})
}

// An anonymous flood cannot fill the caches or evict what real clients
// use: 1,000 distinct 16 KB documents leave the document cache within
// its 4 MiB and every document a signed-in client had used still cached;
// 300 anonymous 60 KB persisted-query registrations are not kept at all
// (a signed-in one is); 1,000 distinct grab texts, even from a signed-in
// client, do not evict the grab plan in use. (Not parallel: it reads the
// process's cache metrics.)
func TestCachesKeepWhatRealClientsUse(t *testing.T) {
	s := newServer(t)
	user := s.token(t, 2, auth.RoleUser)
	var real []string
	for i := range 20 {
		real = append(real, fmt.Sprintf("query Real%d { vouchers(first: %d) { pageInfo { hasNextPage } } }", i, i+1))
	}
	grab := `mutation Grab($v: ID!) { seckillVoucher(voucherId: $v) { code orderId } }`
	for range 5 {
		for _, q := range real {
			if errs := errorsOf(t, s.handler, user, q); len(errs) != 0 {
				t.Fatalf("%s: %+v", q, errs)
			}
		}
		if rec := s.post(user, grab, map[string]any{"v": "999999"}); rec.Code != http.StatusOK {
			t.Fatalf("grab: %d %s", rec.Code, rec.Body)
		}
	}

	filler := strings.Repeat("z", 16<<10)
	for i := range 1000 {
		q := fmt.Sprintf("# %d %s\n{ __schema { queryType { name } } }", i, filler)
		if errs := errorsOf(t, s.handler, "", q); len(errs) != 0 {
			t.Fatalf("flood document: %+v", errs)
		}
	}
	if b := cacheBytes(t, "documents"); b <= 0 || b > 4<<20 {
		t.Fatalf("the document cache holds %v bytes after the flood; its bound is %d", b, 4<<20)
	}
	big := strings.Repeat("p", 60<<10)
	persisted := cacheBytes(t, "persisted") // another test's handler may have set it
	for i := range 300 {
		q := fmt.Sprintf("# %d %s\n{ __typename }", i, big)
		postAPQ(t, s.handler, "", sha(q), q)
	}
	if b := cacheBytes(t, "persisted"); b != persisted {
		t.Fatalf("anonymous registrations left %v bytes in the persisted-query cache", b)
	}
	for i := range 1000 {
		q := fmt.Sprintf("# flood %d\n%s", i, grab)
		s.post(user, q, map[string]any{"v": "999999"})
	}

	misses := cacheMisses(t, "documents")
	for _, q := range real {
		if errs := errorsOf(t, s.handler, user, q); len(errs) != 0 {
			t.Fatalf("%s: %+v", q, errs)
		}
	}
	if n := cacheMisses(t, "documents") - misses; n != 0 {
		t.Fatalf("%v of the real clients' documents were evicted by the flood", n)
	}
	misses = cacheMisses(t, "plans")
	s.post(user, grab, map[string]any{"v": "999999"})
	if n := cacheMisses(t, "plans") - misses; n != 0 {
		t.Fatal("the grab plan in use was evicted by 1,000 texts used once")
	}

	// Persisted queries: an anonymous registration is not kept, a
	// signed-in one is.
	q := "{ __typename }"
	if errs := postAPQ(t, s.handler, "", sha(q), q); len(errs) != 0 {
		t.Fatalf("anonymous registration: %+v", errs)
	}
	if errs := postAPQ(t, s.handler, "", sha(q), ""); len(errs) != 1 || errs[0].Message != "PersistedQueryNotFound" {
		t.Fatalf("after an anonymous registration: %+v, want PersistedQueryNotFound", errs)
	}
	if errs := postAPQ(t, s.handler, user, sha(q), q); len(errs) != 0 {
		t.Fatalf("signed-in registration: %+v", errs)
	}
	if errs := postAPQ(t, s.handler, "", sha(q), ""); len(errs) != 0 {
		t.Fatalf("after a signed-in registration: %+v", errs)
	}
}
