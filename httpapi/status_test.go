package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
)

// statusRequest is one request to /query, as a browser or a GraphQL
// client sends it.
type statusRequest struct {
	method, body, query   string // query: a GET's URL query string
	accept, authorization string
	origin                string
	headers               map[string]string
}

// statusAnswer is a response, its body decoded as far as the tests look.
type statusAnswer struct {
	status  int
	headers http.Header
	body    string
	// hasData says whether the body has a data entry (null or not).
	hasData bool
	codes   []string
	message string
}

func serve(tb testing.TB, h http.Handler, sr statusRequest) statusAnswer {
	tb.Helper()
	method := sr.method
	if method == "" {
		method = http.MethodPost
	}
	req := httptest.NewRequest(method, "/query?"+sr.query, strings.NewReader(sr.body))
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range map[string]string{"Accept": sr.accept, "Authorization": sr.authorization, "Origin": sr.origin} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	for k, v := range sr.headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	out := statusAnswer{status: rec.Code, headers: rec.Header(), body: rec.Body.String()}
	var body struct {
		Data   *json.RawMessage `json:"data"`
		Errors []struct {
			Message    string         `json:"message"`
			Extensions map[string]any `json:"extensions"`
		} `json:"errors"`
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(rec.Body.Bytes(), &raw) == nil {
		_, out.hasData = raw["data"]
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
	}
	for i, e := range body.Errors {
		code, _ := e.Extensions["code"].(string)
		out.codes = append(out.codes, code)
		if i == 0 {
			out.message = e.Message
		}
	}
	return out
}

const (
	acceptJSON     = "application/json"
	acceptResponse = "application/graphql-response+json"
	// acceptBoth is what Apollo Client and urql send.
	acceptBoth = "application/graphql-response+json, application/json;q=0.9"
)

// The status codes of the GraphQL-over-HTTP specification, for both
// media types: a well-formed request that fails to parse, validate or
// coerce its variables is 200 as application/json and 400 as
// application/graphql-response+json, and a request error never has a
// data entry; a request with no query is 400; one that accepts neither
// media type is 406; a mutation over GET is 405 in the type asked for.
// The persisted-query miss keeps 200 and "data": null (see
// graphQLOverHTTP).
func TestStatusCodesFollowGraphQLOverHTTP(t *testing.T) {
	tokens, user := twinUser(t)
	_, h := twinHandlers(t, tokens, 0)
	bearer := "Bearer " + user
	const grab = `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }`
	getQuery := func(v url.Values) string { return v.Encode() }
	cases := []struct {
		name     string
		req      statusRequest
		status   int
		ct       string
		hasData  bool
		code     string
		contains string
	}{
		{"parse error as json", statusRequest{body: body(`{ serverTime`, nil), accept: acceptJSON}, 200, acceptJSON, false, "BAD_USER_INPUT", ""},
		{"parse error as graphql-response+json", statusRequest{body: body(`{ serverTime`, nil), accept: acceptResponse}, 400, acceptResponse, false, "BAD_USER_INPUT", ""},
		{"parse error, both accepted", statusRequest{body: body(`{ serverTime`, nil), accept: acceptBoth}, 400, acceptResponse, false, "BAD_USER_INPUT", ""},
		{"parse error, no Accept", statusRequest{body: body(`{ serverTime`, nil)}, 200, acceptJSON, false, "BAD_USER_INPUT", ""},
		{"validation error as json", statusRequest{body: body(`{ noSuchField }`, nil), accept: acceptJSON}, 200, acceptJSON, false, "BAD_USER_INPUT", "noSuchField"},
		{"validation error as graphql-response+json", statusRequest{body: body(`{ noSuchField }`, nil), accept: acceptResponse}, 400, acceptResponse, false, "BAD_USER_INPUT", "noSuchField"},
		{"variable coercion error as json", statusRequest{body: body(grab, map[string]any{"v": true}), accept: acceptJSON}, 200, acceptJSON, false, "BAD_USER_INPUT", ""},
		{"variable coercion error as graphql-response+json", statusRequest{body: body(grab, map[string]any{"v": true}), accept: acceptResponse}, 400, acceptResponse, false, "BAD_USER_INPUT", ""},
		{"GET parse error as graphql-response+json", statusRequest{method: http.MethodGet, query: getQuery(url.Values{"query": {"{"}}), accept: acceptResponse}, 400, acceptResponse, false, "BAD_USER_INPUT", ""},
		{"no query as json", statusRequest{body: `{}`, accept: acceptJSON}, 400, acceptJSON, false, "BAD_USER_INPUT", "no query"},
		{"no query as graphql-response+json", statusRequest{body: `{"variables":{}}`, accept: acceptResponse}, 400, acceptResponse, false, "BAD_USER_INPUT", "no query"},
		{"GET with no query", statusRequest{method: http.MethodGet, accept: acceptJSON}, 400, acceptJSON, false, "BAD_USER_INPUT", "no query"},
		{"only text/html accepted", statusRequest{body: body(`{ serverTime }`, nil), accept: "text/html"}, 406, acceptJSON, false, "BAD_USER_INPUT", "Accept"},
		{"GET, only text/html accepted", statusRequest{method: http.MethodGet, query: getQuery(url.Values{"query": {"{ serverTime }"}}), accept: "text/html,application/xhtml+xml"}, 406, acceptJSON, false, "BAD_USER_INPUT", "Accept"},
		{"json refused with q=0", statusRequest{body: body(`{ serverTime }`, nil), accept: "application/json;q=0, text/plain"}, 406, acceptJSON, false, "BAD_USER_INPUT", "Accept"},
		{"GET mutation as json", statusRequest{method: http.MethodGet, query: getQuery(url.Values{"query": {`mutation { seckillVoucher(voucherId: "1") { code } }`}}), accept: acceptJSON}, 405, acceptJSON, false, "BAD_USER_INPUT", "POST"},
		{"GET mutation as graphql-response+json", statusRequest{method: http.MethodGet, query: getQuery(url.Values{"query": {`mutation { seckillVoucher(voucherId: "1") { code } }`}}), accept: acceptResponse}, 405, acceptResponse, false, "BAD_USER_INPUT", "POST"},
		{"persisted-query miss as graphql-response+json", statusRequest{body: `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"` + strings.Repeat("ab", 32) + `"}}}`, accept: acceptBoth}, 200, acceptResponse, true, "", "PersistedQueryNotFound"},
		{"a field error keeps its data", statusRequest{body: body(grab, map[string]any{"v": "9"}), accept: acceptResponse}, 200, acceptResponse, true, "RATE_LIMITED", ""},
		{"an answer", statusRequest{body: body(grab, map[string]any{"v": "1"}), accept: acceptResponse}, 200, acceptResponse, true, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.authorization = bearer
			got := serve(t, h, tc.req)
			if got.status != tc.status {
				t.Errorf("status %d, want %d: %s", got.status, tc.status, got.body)
			}
			if ct := got.headers.Get("Content-Type"); ct != tc.ct {
				t.Errorf("Content-Type %q, want %q", ct, tc.ct)
			}
			if got.hasData != tc.hasData {
				t.Errorf("data entry present: %v, want %v: %s", got.hasData, tc.hasData, got.body)
			}
			if tc.code != "" && (len(got.codes) == 0 || got.codes[0] != tc.code) {
				t.Errorf("codes %v, want %s first: %s", got.codes, tc.code, got.body)
			}
			if !strings.Contains(got.message, tc.contains) {
				t.Errorf("message %q does not say %q", got.message, tc.contains)
			}
		})
	}
}

// A missing, garbled or expired token answers 401 in both media types,
// on gqlgen's path and the compiled grab path alike, so that a client's
// token refresh keyed on 401 fires; the body keeps UNAUTHENTICATED and
// has no data, and WWW-Authenticate says invalid_token when a token was
// sent. Introspection, which needs no token, is not refused.
func TestUnusableTokenAnswers401(t *testing.T) {
	tokens, _ := twinUser(t)
	compiled, gqlgen := twinHandlers(t, tokens, 0)
	expired, err := tokens.Issue(auth.Identity{UserID: 42, Role: auth.RoleUser}, -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	grab := body(`mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }`, map[string]any{"v": "1"})
	for _, tc := range []struct {
		name, authorization, challenge string
	}{
		{"no token", "", `Bearer realm="flashsale"`},
		{"an expired token", "Bearer " + expired, `Bearer realm="flashsale", error="invalid_token"`},
		{"a garbled token", "Bearer abc.def.ghi", `Bearer realm="flashsale", error="invalid_token"`},
	} {
		for _, accept := range []string{acceptJSON, acceptBoth} {
			for path, h := range map[string]http.Handler{"compiled": compiled, "gqlgen": gqlgen} {
				for _, doc := range []string{grab, body(`{ serverTime }`, nil)} {
					t.Run(tc.name+" "+accept+" "+path, func(t *testing.T) {
						got := serve(t, h, statusRequest{body: doc, accept: accept, authorization: tc.authorization})
						if got.status != http.StatusUnauthorized || got.hasData || len(got.codes) != 1 || got.codes[0] != "UNAUTHENTICATED" {
							t.Fatalf("%d %s; want 401, UNAUTHENTICATED and no data", got.status, got.body)
						}
						if c := got.headers.Get("WWW-Authenticate"); c != tc.challenge {
							t.Errorf("WWW-Authenticate %q, want %q", c, tc.challenge)
						}
					})
				}
			}
		}
	}
	got := serve(t, gqlgen, statusRequest{body: body(`{ __typename }`, nil), accept: acceptJSON})
	if got.status != http.StatusOK || len(got.codes) != 0 {
		t.Fatalf("introspection without a token: %d %s", got.status, got.body)
	}
}

// A batched array body is refused with a message saying batching is not
// supported (BAD_USER_INPUT, 400), before anything runs.
func TestBatchedBodyIsRefusedClearly(t *testing.T) {
	tokens, user := twinUser(t)
	compiled, _ := twinHandlers(t, tokens, 0)
	one := body(`mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }`, map[string]any{"v": "1"})
	for _, b := range []string{"[" + one + "," + one + "]", " \n[" + one + "]", "[]"} {
		got := serve(t, compiled, statusRequest{body: b, accept: acceptBoth, authorization: "Bearer " + user})
		if got.status != http.StatusBadRequest || len(got.codes) != 1 || got.codes[0] != "BAD_USER_INPUT" ||
			!strings.Contains(got.message, "batching is not supported") || got.hasData {
			t.Errorf("%.40s: %d %s; want 400 BAD_USER_INPUT saying batching is not supported", b, got.status, got.body)
		}
	}
}

// Every answer holding RATE_LIMITED carries Retry-After in whole seconds,
// rounded up from retryAfterMs: a grab the voucher's limits refused (a
// field error; voucher 9 answers 1.5 s), on both paths, and an operation
// the flood limit refused before it ran (a request error).
func TestRateLimitedAnswersCarryRetryAfter(t *testing.T) {
	tokens, user := twinUser(t)
	bearer := "Bearer " + user
	compiled, gqlgen := twinHandlers(t, tokens, 0)
	limited := body(`mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }`, map[string]any{"v": "9"})
	for path, h := range map[string]http.Handler{"compiled": compiled, "gqlgen": gqlgen} {
		got := serve(t, h, statusRequest{body: limited, accept: acceptBoth, authorization: bearer})
		if len(got.codes) != 1 || got.codes[0] != "RATE_LIMITED" || got.headers.Get("Retry-After") != "2" {
			t.Errorf("%s: a rate-limited grab: Retry-After %q, %s; want 2", path, got.headers.Get("Retry-After"), got.body)
		}
		ok := serve(t, h, statusRequest{body: body(`mutation { seckillVoucher(voucherId: "1") { code } }`, nil), accept: acceptBoth, authorization: bearer})
		if ok.headers.Get("Retry-After") != "" {
			t.Errorf("%s: an OK grab carries Retry-After", path)
		}
	}
	flooded, _ := twinHandlers(t, tokens, 1) // a burst of 2, then 1 a second
	for _, accept := range []string{acceptJSON, acceptResponse} {
		var got statusAnswer
		for range 4 {
			got = serve(t, flooded, statusRequest{body: body(`{ serverTime }`, nil), accept: accept, authorization: bearer})
		}
		if len(got.codes) != 1 || got.codes[0] != "RATE_LIMITED" || got.headers.Get("Retry-After") != "1" {
			t.Errorf("%s: flood-limited: %d, Retry-After %q, %s; want RATE_LIMITED, Retry-After 1", accept, got.status, got.headers.Get("Retry-After"), got.body)
		}
	}
}

// A variable whose value does not fit its declared type is named, with
// the type wanted and the JSON given, instead of gqlparser's "cannot use
// map as ID" or "cannot be null" beside a path.
func TestVariableErrorsSayWhatWasExpected(t *testing.T) {
	tokens, user := twinUser(t)
	_, h := twinHandlers(t, tokens, 0)
	const grab = `mutation($orderId: ID!) { seckillVoucher(voucherId: $orderId) { code } }`
	const packet = `mutation($in: CreateRedPacketInput!) { createRedPacket(input: $in) { id } }`
	const flag = `query($b: Boolean!) { serverTime @include(if: $b) }`
	for _, tc := range []struct {
		name, query string
		vars        map[string]any
		want        string
	}{
		{"an object for an ID", grab, map[string]any{"orderId": map[string]any{"id": 1}}, "variable $orderId: expected an ID (string), got an object"},
		{"a list for an ID", grab, map[string]any{"orderId": []int{1}}, "variable $orderId: expected an ID (string), got a list"},
		{"a boolean for an ID", grab, map[string]any{"orderId": true}, "variable $orderId: expected an ID (string), got a boolean"},
		{"null for an ID!", grab, map[string]any{"orderId": nil}, "variable $orderId: expected an ID (string), got null"},
		{"an ID! not given", grab, map[string]any{}, "variable $orderId: expected an ID (string), got nothing, and it is required"},
		{"a string for a Boolean", flag, map[string]any{"b": "yes"}, "variable $b: expected a Boolean (true or false), got a string or a number"},
		{"a string for an input object", packet, map[string]any{"in": "x"}, "variable $in: expected a CreateRedPacketInput, got a string or a number"},
		{"null for an input field", packet, map[string]any{"in": map[string]any{"totalCents": nil, "count": 1}}, "variable $in.totalCents: expected an Int (integer), got null"},
		{"an unknown input field", packet, map[string]any{"in": map[string]any{"totalCents": 1, "count": 1, "colour": "red"}}, "variable $in.colour: the input type has no such field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serve(t, h, statusRequest{body: body(tc.query, tc.vars), accept: acceptJSON, authorization: "Bearer " + user})
			if len(got.codes) != 1 || got.codes[0] != "BAD_USER_INPUT" || got.message != tc.want {
				t.Fatalf("%s; want one BAD_USER_INPUT saying %q", got.body, tc.want)
			}
		})
	}
}
