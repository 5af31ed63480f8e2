package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"flashsale/internal/auth"
	"flashsale/testkit/nodetest"
)

func TestUnsupportedRequestsGetACode(t *testing.T) {
	t.Parallel()
	s := nodetest.Start(t, nodetest.Options{})
	user := s.Token(t, 4, auth.RoleUser)
	const body = `{"query":"{ __typename }"}`
	get := func(params url.Values) string { return "/query?" + params.Encode() }
	cases := []struct {
		name, method, target, contentType, body string
		status                                  int
	}{
		{"text/plain", http.MethodPost, "/query", "text/plain", body, http.StatusUnsupportedMediaType},
		{"form data", http.MethodPost, "/query", "application/x-www-form-urlencoded", "query=%7B__typename%7D", http.StatusUnsupportedMediaType},
		{"multipart", http.MethodPost, "/query", "multipart/form-data; boundary=x", "--x--", http.StatusUnsupportedMediaType},
		{"no content type", http.MethodPost, "/query", "", body, http.StatusUnsupportedMediaType},
		{"bad content type", http.MethodPost, "/query", ";;;", body, http.StatusUnsupportedMediaType},
		{"PUT", http.MethodPut, "/query", "application/json", body, http.StatusMethodNotAllowed},
		{"DELETE", http.MethodDelete, "/query", "", "", http.StatusMethodNotAllowed},
		{"GET mutation", http.MethodGet, get(url.Values{"query": {`mutation { seckillVoucher(voucherId: "1") { code } }`}}), "", "", http.StatusMethodNotAllowed},
		{"GET named mutation", http.MethodGet, get(url.Values{"query": {`query Q { __typename } mutation M { seckillVoucher(voucherId: "1") { code } }`}, "operationName": {"M"}}), "", "", http.StatusMethodNotAllowed},
		{"GET bad variables", http.MethodGet, get(url.Values{"query": {`{ __typename }`}, "variables": {"{nope"}}), "", "", http.StatusBadRequest},
		{"GET bad extensions", http.MethodGet, get(url.Values{"query": {`{ __typename }`}, "extensions": {"[1"}}), "", "", http.StatusBadRequest},
		{"GET malformed query string", http.MethodGet, "/query?query=%zz", "", "", http.StatusBadRequest},
		{"GET query string over the body limit", http.MethodGet, get(url.Values{"query": {"{ __typename " + strings.Repeat("# padding\n", 90_000) + "}"}}), "", "", http.StatusRequestURITooLong},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.Send(t, tc.method, tc.target, tc.contentType, tc.body, user)
			r.WantCode(t, tc.status, "BAD_USER_INPUT")
			if len(r.Data) > 0 && string(r.Data) != "null" {
				t.Fatalf("data %s", r.Data)
			}
		})
	}

	t.Run("GET and POST queries still work", func(t *testing.T) {
		for _, r := range []nodetest.Response{
			s.Send(t, http.MethodGet, get(url.Values{"query": {`query($n: Int) { vouchers(first: $n) { pageInfo { hasNextPage } } }`}, "variables": {`{"n": 1}`}}), "", "", user),
			s.Send(t, http.MethodPost, "/query", "application/json; charset=utf-8", body, user),
		} {
			if r.Status != http.StatusOK || len(r.Errors) > 0 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
		}
	})
}

func TestRequestErrorsDoNotEchoTheRequest(t *testing.T) {
	t.Parallel()
	s := nodetest.Start(t, nodetest.Options{})
	user := s.Token(t, 4, auth.RoleUser)
	long := "f" + strings.Repeat("x", 60_000)
	cases := []struct{ name, body, want string }{
		{"array body", `[{"query":"{__typename}"}]`, "batching is not supported: send each operation in a request of its own, as one JSON object"},
		{"query not a string", `{"query": 1}`, "request body must be a JSON object with a query string"},
		{"truncated body", `{"query": "{ __typename }`, "request body must be a JSON object with a query string"},
		{"long field name", `{"query":"{ ` + long + ` }"}`, ""},
		{"long operation name", `{"query":"{ __typename }","operationName":"` + long + `"}`, ""},
		{"long argument name", `{"query":"{ vouchers(` + long + `: 1) { pageInfo { hasNextPage } } }"}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.Send(t, http.MethodPost, "/query", "application/json", tc.body, user)
			if len(r.Errors) == 0 {
				t.Fatalf("accepted: %s", r.Body)
			}
			for _, e := range r.Errors {
				if e.Code() != "BAD_USER_INPUT" {
					t.Errorf("code %q: %s", e.Code(), e.Message)
				}
				if n := utf8.RuneCountInString(e.Message); n > 210 {
					t.Errorf("message is %d characters: %.80s…", n, e.Message)
				}
				for _, leak := range []string{"body:", "json:", "Go value", "graphql.RawParams", "__typename"} {
					if strings.Contains(e.Message, leak) {
						t.Errorf("message %q leaks %q", e.Message, leak)
					}
				}
				if tc.want != "" && e.Message != tc.want {
					t.Errorf("message %q, want %q", e.Message, tc.want)
				}
			}
			if len(r.Body) > 2000 {
				t.Errorf("response is %d bytes: the request is echoed", len(r.Body))
			}
		})
	}
}

// TestEvery405SaysWhatIsAllowed: a 405 must carry Allow (RFC 9110
// 15.5.6); gqlgen answered HEAD with a bare 405.
func TestEvery405SaysWhatIsAllowed(t *testing.T) {
	t.Parallel()
	s := nodetest.Start(t, nodetest.Options{})
	srv := httptest.NewServer(s.GraphQL)
	t.Cleanup(srv.Close)
	mutation := "/query?" + url.Values{"query": {`mutation { seckillVoucher(voucherId: "1") { code } }`}}.Encode()
	for _, tc := range []struct{ method, target, allow string }{
		{http.MethodHead, "/query", "OPTIONS, GET, POST"},
		{http.MethodPut, "/query", "OPTIONS, GET, POST"},
		{http.MethodDelete, "/query", "OPTIONS, GET, POST"},
		{http.MethodPatch, "/query", "OPTIONS, GET, POST"},
		{http.MethodGet, mutation, "POST"},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.target, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			allow := strings.Split(resp.Header.Get("Allow"), ", ")
			slices.Sort(allow)
			want := strings.Split(tc.allow, ", ")
			slices.Sort(want)
			if resp.StatusCode != http.StatusMethodNotAllowed || !slices.Equal(allow, want) {
				t.Fatalf("status %d, Allow %q; want 405 with Allow %q", resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
			}
		})
	}
}
