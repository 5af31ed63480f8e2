package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"flashsale/domain"
)

// Every 429 written outside gqlgen (the edge's ready-made one and those
// with words of their own: the budget's, the anonymous gate's, a
// websocket handshake's) has one shape: status, Retry-After rounded up
// to whole seconds, the media type the client asked for, and a
// RATE_LIMITED error with retryAfterMs.
func TestEveryRefusalOutsideGqlgenHasOneShape(t *testing.T) {
	t.Parallel()
	const wait = 1500 * time.Millisecond
	for _, accept := range []string{"", "application/json", "application/graphql-response+json"} {
		write := map[string]func(w http.ResponseWriter, r *http.Request){
			"edge": func(w http.ResponseWriter, r *http.Request) { writeRefusal(w, r, wait, false) },
			"with words": func(w http.ResponseWriter, r *http.Request) {
				writeRateLimited(w, r, nil, &domain.Error{Code: domain.CodeRateLimited, RetryAfter: wait, Message: "over budget"})
			},
		}
		var first *httptest.ResponseRecorder
		for name, f := range write {
			r := httptest.NewRequest(http.MethodPost, "/query", nil)
			if accept != "" {
				r.Header.Set("Accept", accept)
			}
			rec := httptest.NewRecorder()
			f(rec, r)
			var answer struct {
				Errors []struct {
					Extensions map[string]any `json:"extensions"`
				} `json:"errors"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || len(answer.Errors) != 1 {
				t.Fatalf("%s, Accept %q: %v %s", name, accept, err, rec.Body)
			}
			ext := answer.Errors[0].Extensions
			if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" ||
				ext["code"] != "RATE_LIMITED" || ext["retryAfterMs"] != float64(1500) {
				t.Errorf("%s, Accept %q: %d Retry-After %q %v", name, accept, rec.Code, rec.Header().Get("Retry-After"), ext)
			}
			if first != nil && rec.Header().Get("Content-Type") != first.Header().Get("Content-Type") {
				t.Errorf("Accept %q: %s answers %q, the other %q", accept, name, rec.Header().Get("Content-Type"), first.Header().Get("Content-Type"))
			}
			first = rec
		}
	}
}
