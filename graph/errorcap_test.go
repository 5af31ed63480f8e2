package graph_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"flashsale/internal/auth"
	"flashsale/testkit/nodetest"
)

// errorsOf posts query with token and returns the errors of the answer.
func errorsOf(tb testing.TB, h http.Handler, token, query string) []gqlError {
	tb.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
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

// wantCut asserts kept errors of code first and one last error, of code
// last, that says cut more were left out.
func wantCut(tb testing.TB, errs []gqlError, kept int, first, last string, cut int) {
	tb.Helper()
	if len(errs) != kept+1 {
		tb.Fatalf("%d errors, want %d and one that counts the rest", len(errs), kept)
	}
	for _, e := range errs[:kept] {
		if e.code() != first {
			tb.Fatalf("error %+v, want code %s", e, first)
		}
	}
	m := errs[kept]
	if m.code() != last || m.Extensions["reason"] != "TOO_MANY_ERRORS" || m.Extensions["cut"] != float64(cut) ||
		!strings.HasPrefix(m.Message, fmt.Sprintf("%d more errors were cut", cut)) {
		tb.Fatalf("last error %+v, want %s TOO_MANY_ERRORS saying %d were cut", m, last, cut)
	}
}

// An answer reports at most 50 errors and one more that counts the rest
// (60 unknown vouchers, from execution); validation stops building them
// after 10 (100 unknown fields, within every shape limit).
func TestAnswersReportAtMost50Errors(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	user := s.token(t, 2, auth.RoleUser)
	var unknown, missing strings.Builder
	unknown.WriteString("{")
	missing.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&unknown, " x%d", i)
	}
	for i := range 60 {
		fmt.Fprintf(&missing, ` a%d: voucher(id: "%d") { id }`, i, 900000+i)
	}
	unknown.WriteString(" }")
	missing.WriteString(" }")
	t.Run("validation", func(t *testing.T) {
		wantCut(t, errorsOf(t, s.handler, user, unknown.String()), 10, "BAD_USER_INPUT", "BAD_USER_INPUT", 90)
	})
	t.Run("execution", func(t *testing.T) {
		wantCut(t, errorsOf(t, s.handler, user, missing.String()), 50, "NOT_FOUND", "NOT_FOUND", 10)
	})
	t.Run("validation over a websocket", func(t *testing.T) {
		h := httptest.NewServer(s.handler)
		t.Cleanup(h.Close)
		c := nodetest.InitWS(t, h, user)
		q, _ := json.Marshal(map[string]any{"query": unknown.String()})
		nodetest.SendWS(t, c, `{"id":"1","type":"subscribe","payload":`+string(q)+`}`)
		m := nodetest.ReadUntil(t, c, "next", "error")
		var errs []gqlError
		if m.Type == "next" {
			var resp struct{ Errors []gqlError }
			_ = json.Unmarshal(m.Payload, &resp)
			errs = resp.Errors
		} else {
			_ = json.Unmarshal(m.Payload, &errs)
		}
		if len(errs) != 11 || errs[10].Extensions["reason"] != "TOO_MANY_ERRORS" {
			t.Fatalf("%d errors over the websocket, want 11, the last counting those cut", len(errs))
		}
	})
}
