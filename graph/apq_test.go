package graph_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"flashsale/internal/auth"
)

// An automatic persisted query the service does not know answers
// extensions.code PERSISTED_QUERY_NOT_FOUND (the code Apollo's and urql's
// persisted-query links match to resend with the text), over POST and
// over GET (urql sends hash-only queries as GET); once registered, the
// hash alone answers.
func TestPersistedQueryMissAnswersItsOwnCode(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	user := s.token(t, 2, auth.RoleUser)
	get := func(hash string) []gqlError {
		t.Helper()
		ext, _ := json.Marshal(map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hash}})
		req := httptest.NewRequest(http.MethodGet, "/query?extensions="+url.QueryEscape(string(ext)), nil)
		req.Header.Set("Authorization", "Bearer "+user)
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, req)
		var resp struct{ Errors []gqlError }
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("%v: %.200s", err, rec.Body.String())
		}
		return resp.Errors
	}
	miss := func(how string, errs []gqlError) {
		t.Helper()
		e := wantCode(t, errs, "PERSISTED_QUERY_NOT_FOUND")
		if e.Message != "PersistedQueryNotFound" || len(e.Extensions) != 1 {
			t.Fatalf("%s: %+v, want message PersistedQueryNotFound and the code alone", how, e)
		}
	}
	for _, tc := range []struct {
		name string
		send func(hash, query string) []gqlError
	}{
		{"POST", func(hash, query string) []gqlError { return postAPQ(t, s.handler, user, hash, query) }},
		{"GET", func(hash, query string) []gqlError {
			if query != "" {
				return postAPQ(t, s.handler, user, hash, query)
			}
			return get(hash)
		}},
	} {
		q := "query Apq" + tc.name + " { serverTime }"
		miss(tc.name+" before registration", tc.send(sha(q), ""))
		if errs := tc.send(sha(q), q); len(errs) != 0 {
			t.Fatalf("%s registration: %+v", tc.name, errs)
		}
		if errs := tc.send(sha(q), ""); len(errs) != 0 {
			t.Fatalf("%s hash only after registration: %+v", tc.name, errs)
		}
	}
	// A hash that does not match its text is bad input, as before.
	wantCode(t, postAPQ(t, s.handler, user, sha("{ a }"), "{ serverTime }"), "BAD_USER_INPUT")
}
