package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"flashsale/graph"
	"flashsale/internal/auth"
)

// contractCodes are the extensions.code values the public contract allows,
// and PERSISTED_QUERY_NOT_FOUND, the automatic-persisted-query protocol's
// request for a hash's text (clients' persisted-query links match it).
var contractCodes = map[string]bool{
	"UNAUTHENTICATED": true, "FORBIDDEN": true, "RATE_LIMITED": true, "BAD_USER_INPUT": true,
	"NOT_FOUND": true, "INTERNAL": true, "NOT_IMPLEMENTED": true, "UNAVAILABLE": true,
	graph.PersistedQueryNotFound: true,
}

// queryFuzzer is the /query handler on real stores with one voucher, and
// a token per caller: none, a user, an admin.
type queryFuzzer struct {
	s      *testServer
	tokens [3]string
}

func newQueryFuzzer(f *testing.F) *queryFuzzer {
	f.Helper()
	s := newServer(f)
	s.createVoucher(f, seckillInput(1, 10))
	return &queryFuzzer{s: s, tokens: [3]string{"", s.token(f, 7, auth.RoleUser), s.admin(f)}}
}

// post sends body as the caller picked by who and checks the answer: no
// 5xx but 503, a JSON answer, and every error coded by the contract.
func (q *queryFuzzer) post(t *testing.T, body []byte, who uint8) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if tok := q.tokens[int(who)%len(q.tokens)]; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	q.s.handler.ServeHTTP(rec, req)
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d for %.300q: %.300s", rec.Code, body, rec.Body.String())
	}
	var answer struct {
		Errors []gqlError `json:"errors"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
		t.Fatalf("status %d, answer is not JSON (%v) for %.300q: %.300s", rec.Code, err, body, rec.Body.String())
	}
	for _, e := range answer.Errors {
		if !contractCodes[e.code()] {
			t.Fatalf("status %d, error without a contract code for %.300q: %+v", rec.Code, body, e)
		}
	}
}

// FuzzQueryBody posts arbitrary bodies to /query: malformed JSON, GraphQL
// that does not parse or validate, batches, persisted-query hashes, the
// hostile requests the budgets refuse (seeds in
// testdata/fuzz/FuzzQueryBody).
func FuzzQueryBody(f *testing.F) {
	q := newQueryFuzzer(f)
	f.Fuzz(func(t *testing.T, body []byte, who uint8) { q.post(t, body, who) })
}

// FuzzQueryVariables keeps the envelope well formed and fuzzes an
// operation and its variables, where scalars (ID, Time, enums, Int
// ranges) are coerced by our code rather than gqlgen's parser.
func FuzzQueryVariables(f *testing.F) {
	q := newQueryFuzzer(f)
	f.Fuzz(func(t *testing.T, query string, variables []byte, who uint8) {
		quoted, _ := json.Marshal(query)
		body := append(append(append([]byte(`{"query":`), quoted...), `,"variables":`...), variables...)
		q.post(t, append(body, '}'), who)
	})
}
