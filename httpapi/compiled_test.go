package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"flashsale/bench/reference"
	"flashsale/domain"
	"flashsale/graph"
	"flashsale/graph/model"
	"flashsale/internal/auth"
	"flashsale/usecase/seckill"
)

// scriptedGrabber answers each voucher id with a fixed outcome, so that
// one request per id covers every code a grab can answer; voucher 99
// panics, as a resolver bug would.
type scriptedGrabber struct{}

var scriptedOutcomes = map[int64]domain.GrabResult{
	1: {Code: domain.SeckillOK, OrderID: 7301234567890123456},
	2: {Code: domain.SeckillSoldOut},
	3: {Code: domain.SeckillNotFound},
	4: {Code: domain.SeckillNotStarted},
	5: {Code: domain.SeckillEnded},
	6: {Code: domain.SeckillPaused},
	7: {Code: domain.SeckillLimitReached},
	8: {Code: domain.SeckillUnavailable},
	9: {Code: domain.SeckillRateLimited, RetryAfter: 1500 * time.Millisecond},
}

func (scriptedGrabber) Grab(_ context.Context, req domain.GrabRequest) domain.GrabResult {
	if req.VoucherID == 99 {
		panic("scripted resolver bug")
	}
	if res, ok := scriptedOutcomes[req.VoucherID]; ok {
		return res
	}
	return domain.GrabResult{Code: domain.SeckillNotFound}
}

// scriptedGate refuses or fails a grab by its ticket.
type scriptedGate struct{ graph.Gate }

func (scriptedGate) CheckGrab(_ context.Context, _ int64, _ string, _ int64, ticket string) error {
	switch ticket {
	case "forged":
		return domain.ErrForbidden
	case "gone":
		return domain.Errorf(domain.CodeNotFound, "no such voucher")
	case "down":
		return domain.Errorf(domain.CodeUnavailable, "the gate is unavailable")
	}
	return nil
}

// twinHandlers are two handlers over the same resolver, one with the
// compiled path and one without, limited to flood requests a second per
// address (0: no limit) and without an anonymous budget.
func twinHandlers(tb testing.TB, tokens *auth.Tokens, flood int) (compiled, gqlgen http.Handler) {
	tb.Helper()
	r := &graph.Resolver{Seckill: seckill.New(scriptedGate{}, scriptedGrabber{}), Gate: scriptedGate{}}
	opts := twinOptions(tokens, flood)
	gqlgen = NewHandler(r, opts)
	opts.CompiledGrabs = true
	compiled = NewHandler(r, opts)
	return compiled, gqlgen
}

// twinOptions are the twin handlers' options: the handler's zero options
// take the node's defaults, so the limits these tests do not exercise are
// turned off (negative).
func twinOptions(tokens *auth.Tokens, flood int) HandlerOptions {
	return HandlerOptions{Tokens: tokens, Log: slog.New(slog.DiscardHandler), FloodPerSec: cmp.Or(flood, -1),
		Anonymous: AnonymousBudget{InFlight: -1, PerSecond: -1}}
}

// twinUser returns the twin handlers' token issuer and a user's token.
func twinUser(tb testing.TB) (*auth.Tokens, string) {
	tb.Helper()
	tokens := auth.NewTokens("compiled-test-secret-0123456789")
	user, err := tokens.Issue(auth.Identity{UserID: 42, Role: auth.RoleUser}, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return tokens, user
}

type twinRequest struct {
	body          string
	authorization string
	accept        string
}

// answer is everything a client sees of a response.
type answer struct {
	status  int
	headers http.Header
	body    string
}

func send(h http.Handler, tr twinRequest) answer {
	req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(tr.body))
	req.Header.Set("Content-Type", "application/json")
	if tr.authorization != "" {
		req.Header.Set("Authorization", tr.authorization)
	}
	if tr.accept != "" {
		req.Header.Set("Accept", tr.accept)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{status: rec.Code, headers: rec.Header(), body: rec.Body.String()}
}

func body(query string, vars map[string]any, more ...string) string {
	m := map[string]any{"query": query}
	if vars != nil {
		m["variables"] = vars
	}
	for i := 0; i+1 < len(more); i += 2 {
		m[more[i]] = more[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestCompiledGrabAnswersAsGqlgen sends the same requests to a handler
// with the compiled path and to one without, and requires the same
// status, headers and body bytes: every grab code (and the resolver's
// errors: RATE_LIMITED, the gate's refusals, a bad requestId, a panic),
// every way of giving the arguments, selections in any order with
// aliases, missing and bad tokens, both response media types, and the
// documents the compiled path must leave to gqlgen. It also checks which
// requests the compiled path answered, so that a path that declines
// everything cannot pass.
func TestCompiledGrabAnswersAsGqlgen(t *testing.T) {
	tokens, user := twinUser(t)
	admin, _ := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, time.Hour)
	expired, _ := tokens.Issue(auth.Identity{UserID: 42, Role: auth.RoleUser}, -time.Minute)
	compiled, gqlgen := twinHandlers(t, tokens, 0)

	const (
		plain    = `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code orderId message } }`
		named    = `mutation Grab($v: ID!, $r: String, $t: String) { seckillVoucher(voucherId: $v, requestId: $r, ticket: $t) { __typename message code orderId } }`
		strict   = `mutation($v: ID!, $r: String!) { seckillVoucher(voucherId: $v, requestId: $r) { orderId code } }`
		aliased  = `mutation { g: seckillVoucher(voucherId: "1") { c: code o: orderId m: message t: __typename } }`
		literal  = `mutation { seckillVoucher(voucherId: 2, requestId: "key-1", ticket: null) { code } }`
		block    = `mutation { seckillVoucher(voucherId: "1", requestId: """block key""") { code orderId } }`
		reused   = `mutation($k: String) { seckillVoucher(voucherId: "1", requestId: $k, ticket: $k) { code } }`
		twoOps   = `mutation A { seckillVoucher(voucherId: "1") { code } } mutation B { seckillVoucher(voucherId: "2") { code } }`
		fragment = `mutation { seckillVoucher(voucherId: "1") { ...R } } fragment R on SeckillResult { code orderId }`
		include  = `mutation($v: ID!, $i: Boolean!) { seckillVoucher(voucherId: $v) { code orderId @include(if: $i) } }`
		merged   = `mutation { seckillVoucher(voucherId: "1") { code code orderId } }`
		rootName = `mutation { __typename seckillVoucher(voucherId: "1") { code } }`
		defaults = `mutation($v: ID! = "2") { seckillVoucher(voucherId: $v) { code } }`
		twoGrabs = `mutation { a: seckillVoucher(voucherId: "1") { code } b: seckillVoucher(voucherId: "2") { code } }`
		badField = `mutation { seckillVoucher(voucherId: "1") { code price } }`
		query    = `{ serverTime }`
	)
	bearer := "Bearer " + user
	type tc struct {
		name string
		req  twinRequest
		// fast is whether the compiled path must answer it.
		fast bool
	}
	var cases []tc
	for id := range int64(10) {
		cases = append(cases, tc{fmt.Sprintf("voucher %d by variable", id+1), twinRequest{body: body(plain, map[string]any{"v": fmt.Sprint(id + 1)}), authorization: bearer}, true})
	}
	cases = append(cases, []tc{
		{"an error under an alias, on the third line", twinRequest{body: body("mutation {\n\n  grab: seckillVoucher(voucherId: \"9\") { code }\n}", nil), authorization: bearer}, true},
		{"a resolver panic", twinRequest{body: body(plain, map[string]any{"v": "99"}), authorization: bearer}, true},
		{"voucherId as a JSON number", twinRequest{body: body(plain, map[string]any{"v": 1}), authorization: bearer}, true},
		{"every argument named, fields reordered", twinRequest{body: body(named, map[string]any{"v": "1", "r": "retry-7", "t": nil}, "operationName", "Grab"), authorization: bearer}, true},
		{"operation name omitted", twinRequest{body: body(named, map[string]any{"v": "2"}), authorization: bearer}, true},
		{"a forged ticket", twinRequest{body: body(named, map[string]any{"v": "1", "t": "forged"}), authorization: bearer}, true},
		{"the gate does not know the voucher", twinRequest{body: body(named, map[string]any{"v": "1", "t": "gone"}), authorization: bearer}, true},
		{"the gate is down", twinRequest{body: body(named, map[string]any{"v": "1", "t": "down"}), authorization: bearer}, true},
		{"requestId too long", twinRequest{body: body(named, map[string]any{"v": "1", "r": strings.Repeat("k", 65)}), authorization: bearer}, true},
		{"requestId with a control byte", twinRequest{body: body(named, map[string]any{"v": "1", "r": "a\tb"}), authorization: bearer}, true},
		{"requestId with markup", twinRequest{body: body(named, map[string]any{"v": "1", "r": "<b>&amp;</b>"}), authorization: bearer}, true},
		{"non-null requestId given", twinRequest{body: body(strict, map[string]any{"v": "7", "r": "x"}), authorization: bearer}, true},
		{"aliases everywhere", twinRequest{body: body(aliased, nil), authorization: bearer}, true},
		{"literal arguments", twinRequest{body: body(literal, nil), authorization: bearer}, true},
		{"a block string literal", twinRequest{body: body(block, nil), authorization: bearer}, true},
		{"one variable for two arguments", twinRequest{body: body(reused, map[string]any{"k": "forged"}), authorization: bearer}, true},
		{"extra variables", twinRequest{body: body(plain, map[string]any{"v": "2", "unused": []int{1}}), authorization: bearer}, true},
		{"an admin token", twinRequest{body: body(plain, map[string]any{"v": "1"}), authorization: "Bearer " + admin}, true},
		{"no token", twinRequest{body: body(plain, map[string]any{"v": "1"})}, true},
		{"an expired token", twinRequest{body: body(plain, map[string]any{"v": "1"}), authorization: "Bearer " + expired}, true},
		{"a garbled token", twinRequest{body: body(plain, map[string]any{"v": "1"}), authorization: "Bearer abc.def.ghi"}, true},
		{"not a bearer token", twinRequest{body: body(plain, map[string]any{"v": "1"}), authorization: "Basic Zm9vOmJhcg=="}, true},
		{"graphql-response+json", twinRequest{body: body(plain, map[string]any{"v": "1"}), authorization: bearer, accept: "application/graphql-response+json"}, true},
		{"an error as graphql-response+json", twinRequest{body: body(plain, map[string]any{"v": "9"}), authorization: bearer, accept: "application/graphql-response+json"}, true},
		{"an unauthenticated graphql-response+json", twinRequest{body: body(plain, map[string]any{"v": "1"}), accept: "application/graphql-response+json;q=0.9, text/html"}, true},
		{"accept anything", twinRequest{body: body(plain, map[string]any{"v": "1"}), authorization: bearer, accept: "*/*"}, true},
		// Refused 406 by the request guard before either path.
		{"an accept header naming nothing known", twinRequest{body: body(plain, map[string]any{"v": "1"}), authorization: bearer, accept: "text/html"}, false},
		// Left to gqlgen: answered as always, never by the compiled path.
		{"voucherId missing", twinRequest{body: body(plain, nil), authorization: bearer}, false},
		{"voucherId not canonical", twinRequest{body: body(plain, map[string]any{"v": "01"}), authorization: bearer}, false},
		{"voucherId a fraction", twinRequest{body: body(plain, map[string]any{"v": 1.5}), authorization: bearer}, false},
		{"voucherId a boolean", twinRequest{body: body(plain, map[string]any{"v": true}), authorization: bearer}, false},
		{"voucherId negative", twinRequest{body: body(plain, map[string]any{"v": -3}), authorization: bearer}, false},
		{"requestId a number", twinRequest{body: body(named, map[string]any{"v": "1", "r": 5}), authorization: bearer}, false},
		{"non-null requestId missing", twinRequest{body: body(strict, map[string]any{"v": "1"}), authorization: bearer}, false},
		{"non-null requestId null", twinRequest{body: body(strict, map[string]any{"v": "1", "r": nil}), authorization: bearer}, false},
		{"a wrong operation name", twinRequest{body: body(named, map[string]any{"v": "1"}, "operationName", "Other"), authorization: bearer}, false},
		{"two operations, one named", twinRequest{body: body(twoOps, nil, "operationName", "B"), authorization: bearer}, false},
		{"two operations, none named", twinRequest{body: body(twoOps, nil), authorization: bearer}, false},
		{"a fragment", twinRequest{body: body(fragment, nil), authorization: bearer}, false},
		{"a directive", twinRequest{body: body(include, map[string]any{"v": "1", "i": false}), authorization: bearer}, false},
		{"a merged field", twinRequest{body: body(merged, nil), authorization: bearer}, false},
		{"__typename beside the grab", twinRequest{body: body(rootName, nil), authorization: bearer}, false},
		{"a variable default", twinRequest{body: body(defaults, nil), authorization: bearer}, false},
		{"two grabs", twinRequest{body: body(twoGrabs, nil), authorization: bearer}, false},
		{"an unknown field", twinRequest{body: body(badField, nil), authorization: bearer}, false},
		{"a query naming the field in a string", twinRequest{body: body(query, nil, "operationName", ""), authorization: bearer}, false},
		{"a syntax error", twinRequest{body: `{"query":"mutation { seckillVoucher(voucherId: \"1\") { code }"}`, authorization: bearer}, false},
		{"query not a string", twinRequest{body: `{"query":["seckillVoucher"]}`, authorization: bearer}, false},
		{"variables not an object", twinRequest{body: `{"query":"mutation { seckillVoucher(voucherId: \"1\") { code } }","variables":"seckillVoucher"}`, authorization: bearer}, false},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := counterValue(compiledServed)
			got := send(compiled, c.req)
			served := counterValue(compiledServed) - before
			want := send(gqlgen, c.req)
			sameAnswer(t, got, want)
			if c.fast && served != 1 {
				t.Errorf("the compiled path did not answer it (%v)", served)
			}
			if !c.fast && served != 0 {
				t.Errorf("the compiled path answered a request it must leave to gqlgen")
			}
		})
	}

	t.Run("a persisted query by its hash", func(t *testing.T) {
		sum := sha256.Sum256([]byte(named))
		hash := hex.EncodeToString(sum[:])
		ext := func(withQuery bool) string {
			m := map[string]any{
				"variables":  map[string]any{"v": "1", "r": "apq"},
				"extensions": map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hash}},
			}
			if withQuery {
				m["query"] = named
			}
			b, _ := json.Marshal(m)
			return string(b)
		}
		for _, step := range []struct {
			name      string
			withQuery bool
			fast      bool
		}{
			{"before it is registered", false, false},
			{"registering it", true, false},
			{"by hash alone", false, true},
		} {
			before := counterValue(compiledServed)
			got := send(compiled, twinRequest{body: ext(step.withQuery), authorization: bearer})
			served := counterValue(compiledServed) - before
			want := send(gqlgen, twinRequest{body: ext(step.withQuery), authorization: bearer})
			sameAnswer(t, got, want)
			if (served == 1) != step.fast {
				t.Errorf("%s: compiled path answered %v, want %v", step.name, served, step.fast)
			}
		}
	})

	t.Run("the flood limit", func(t *testing.T) {
		compiled, gqlgen := twinHandlers(t, tokens, 1) // a burst of 2, then 1 a second
		req := twinRequest{body: body(plain, map[string]any{"v": "2"}), authorization: bearer}
		for i := range 4 {
			got, want := send(compiled, req), send(gqlgen, req)
			// retryAfterMs counts down in real time between the two.
			got.body = retryAfter.ReplaceAllString(got.body, `"retryAfterMs":N`)
			want.body = retryAfter.ReplaceAllString(want.body, `"retryAfterMs":N`)
			sameAnswer(t, got, want)
			if t.Failed() {
				t.Fatalf("request %d differs", i)
			}
		}
		if got := send(compiled, req); !strings.Contains(got.body, `"RATE_LIMITED"`) {
			t.Errorf("the flood limit did not refuse the compiled path: %s", got.body)
		}
	})
}

// A grab's answer comes on one of two channels, as the contract says:
// business outcomes as data.seckillVoucher.code, and refusals of the
// request (UNAUTHENTICATED, FORBIDDEN, RATE_LIMITED with retryAfterMs,
// BAD_USER_INPUT) as exactly one error with data null. The two sets of
// codes never overlap for a grab, so a client reads its outcome in one
// place as errors[0].extensions.code, else data.seckillVoucher.code. The
// compiled grab path and gqlgen's executor answer every case alike (the
// twin handlers, over scriptedOutcomes).
func TestGrabOutcomesComeOnTheirContractChannel(t *testing.T) {
	t.Parallel()
	tokens, user := twinUser(t)
	compiled, executor := twinHandlers(t, tokens, 0)
	const (
		plain    = `mutation($id: ID!, $ticket: String, $req: String) { seckillVoucher(voucherId: $id, ticket: $ticket, requestId: $req) { code orderId message } }`
		fragment = `mutation($id: ID!, $ticket: String, $req: String) { seckillVoucher(voucherId: $id, ticket: $ticket, requestId: $req) { ... on SeckillResult { code orderId message } } }`
	)
	type grabError struct {
		Message    string
		Extensions map[string]any
	}
	type grabAnswer struct {
		Data *struct {
			SeckillVoucher *struct {
				Code    string
				OrderID *string
			}
		}
		Errors []grabError
	}
	code := func(e grabError) string { c, _ := e.Extensions["code"].(string); return c }
	sendGrab := func(h http.Handler, query, token string, vars map[string]any) (grabAnswer, string) {
		tr := twinRequest{body: body(query, vars)}
		if token != "" {
			tr.authorization = "Bearer " + token
		}
		raw := send(h, tr).body
		var a grabAnswer
		if err := json.Unmarshal([]byte(raw), &a); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		return a, raw
	}
	// The error codes a grab may answer: none is a SeckillCode.
	errorCodes := []string{"UNAUTHENTICATED", "FORBIDDEN", "RATE_LIMITED", "BAD_USER_INPUT", "INTERNAL"}
	for _, c := range model.AllSeckillCode {
		if slices.Contains(errorCodes, string(c)) {
			t.Fatalf("%s is both a SeckillCode and a grab's error code: one place cannot tell them apart", c)
		}
	}
	for _, tc := range []struct {
		name  string
		token string
		vars  map[string]any
		code  string
		data  bool
	}{
		{"OK", user, map[string]any{"id": "1"}, "OK", true},
		{"SOLD_OUT", user, map[string]any{"id": "2"}, "SOLD_OUT", true},
		{"NOT_FOUND", user, map[string]any{"id": "3"}, "NOT_FOUND", true},
		{"NOT_STARTED", user, map[string]any{"id": "4"}, "NOT_STARTED", true},
		{"ENDED", user, map[string]any{"id": "5"}, "ENDED", true},
		{"PAUSED", user, map[string]any{"id": "6"}, "PAUSED", true},
		{"LIMIT_REACHED", user, map[string]any{"id": "7"}, "LIMIT_REACHED", true},
		{"UNAVAILABLE", user, map[string]any{"id": "8"}, "UNAVAILABLE", true},
		{"RATE_LIMITED", user, map[string]any{"id": "9"}, "RATE_LIMITED", false},
		{"the gate's FORBIDDEN", user, map[string]any{"id": "1", "ticket": "forged"}, "FORBIDDEN", false},
		{"UNAUTHENTICATED", "", map[string]any{"id": "1"}, "UNAUTHENTICATED", false},
		{"BAD_USER_INPUT", user, map[string]any{"id": "1", "req": ""}, "BAD_USER_INPUT", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bodies []string
			for _, h := range []struct {
				name, query string
				handler     http.Handler
			}{
				{"compiled", plain, compiled},
				{"executor", plain, executor},
				{"executor, fragment", fragment, compiled},
			} {
				a, raw := sendGrab(h.handler, h.query, tc.token, tc.vars)
				bodies = append(bodies, raw)
				if tc.data {
					if len(a.Errors) != 0 || a.Data == nil || a.Data.SeckillVoucher == nil || a.Data.SeckillVoucher.Code != tc.code {
						t.Fatalf("%s: %s, want data.seckillVoucher.code %s and no error", h.name, raw, tc.code)
					}
					if (tc.code == "OK") != (a.Data.SeckillVoucher.OrderID != nil) {
						t.Fatalf("%s: %s: orderId must be set exactly when OK", h.name, raw)
					}
					continue
				}
				if len(a.Errors) != 1 || code(a.Errors[0]) != tc.code || (a.Data != nil && a.Data.SeckillVoucher != nil) {
					t.Fatalf("%s: %s, want one %s error and no data", h.name, raw, tc.code)
				}
				ms, hasRetry := a.Errors[0].Extensions["retryAfterMs"].(float64)
				if (tc.code == "RATE_LIMITED") != hasRetry || (hasRetry && ms != 1500) {
					t.Fatalf("%s: %s: retryAfterMs (1500) must come with RATE_LIMITED only", h.name, raw)
				}
			}
			if bodies[0] != bodies[1] {
				t.Fatalf("compiled and executor answers differ:\n%s\n%s", bodies[0], bodies[1])
			}
		})
	}
}

var retryAfter = regexp.MustCompile(`"retryAfterMs":\d+`)

func sameAnswer(t *testing.T, got, want answer) {
	t.Helper()
	if got.status != want.status {
		t.Errorf("status %d, gqlgen %d", got.status, want.status)
	}
	if got.body != want.body {
		t.Errorf("body\n%s\ngqlgen\n%s", got.body, want.body)
	}
	if fmt.Sprint(got.headers) != fmt.Sprint(want.headers) {
		t.Errorf("headers %v, gqlgen %v", got.headers, want.headers)
	}
}

// TestCompiledAnswerEscapesAsGqlgen covers the envelope for a message
// with the characters encoding/json escapes (no message we write has
// them today, so no request above reaches this branch).
func TestCompiledAnswerEscapesAsGqlgen(t *testing.T) {
	plan := compileGrab(graph.NewExecutableSchema(graph.Config{Resolvers: &graph.Resolver{}}).Schema(), `mutation { seckillVoucher(voucherId: "1") { message code } }`, Limits{}.withDefaults())
	if plan == nil {
		t.Fatal("no plan")
	}
	for _, msg := range []string{"plain", "a<b>&c", "line\u2028para\u2029", "quote \" back \\ tab \t nul \x00 é"} {
		res := &model.SeckillResult{Code: model.SeckillCodeSoldOut, Message: msg}
		var data bytes.Buffer
		plan.render(&data, res)
		want, err := json.Marshal(graphql.Response{Data: data.Bytes()})
		if err != nil {
			t.Fatal(err)
		}
		got, err := plan.answer(new(bytes.Buffer), res)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%q: %s, gqlgen's envelope %s", msg, got, want)
		}
	}
}

// TestGraphQLCeilingAnswersAsTheService holds the load tool's GraphQL
// ceiling (bench/reference) to the service's own answer to a sold-out
// grab, as seckill-bench sends it: the same status, content type and
// bytes, so that the ceiling's client does the same work as the
// service's.
func TestGraphQLCeilingAnswersAsTheService(t *testing.T) {
	tokens, user := twinUser(t)
	compiled, gqlgen := twinHandlers(t, tokens, 0)
	ceiling := (&reference.GraphQLCeiling{Tokens: tokens}).Handler()
	for _, q := range []string{
		`mutation($v: ID!, $r: String) { seckillVoucher(voucherId: $v, requestId: $r) { code orderId } }`,
		`mutation($v: ID!) { seckillVoucher(voucherId: $v) { code orderId } }`,
	} {
		req := twinRequest{body: body(q, map[string]any{"v": "2", "r": "run-1-0"}), authorization: "Bearer " + user}
		got := send(ceiling, req)
		for name, h := range map[string]http.Handler{"compiled": compiled, "gqlgen": gqlgen} {
			want := send(h, req)
			if got.status != want.status || got.body != want.body || got.headers.Get("Content-Type") != want.headers.Get("Content-Type") {
				t.Errorf("%s: ceiling %d %q %s, service (%s) %d %q %s", q, got.status, got.headers.Get("Content-Type"), got.body,
					name, want.status, want.headers.Get("Content-Type"), want.body)
			}
		}
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// BenchmarkGrabLayer measures what the GraphQL layer costs a grab that
// is answered from memory (the scripted grabber answers SOLD_OUT at
// once), through gqlgen and through the compiled path, each request a
// different user's token, as in a sale.
func BenchmarkGrabLayer(b *testing.B) {
	tokens := auth.NewTokens("compiled-test-secret-0123456789")
	const users = 1024
	bearers := make([]string, users)
	for i := range bearers {
		t, err := tokens.Issue(auth.Identity{UserID: int64(i + 1), Role: auth.RoleUser}, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		bearers[i] = "Bearer " + t
	}
	compiled, gqlgen := twinHandlers(b, tokens, 0)
	doc := body(`mutation Grab($v: ID!, $r: String) { seckillVoucher(voucherId: $v, requestId: $r) { code orderId message } }`, map[string]any{"v": "2"})
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"gqlgen", gqlgen}, {"compiled", compiled}} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(doc))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", bearers[i%users])
				i++
				rec := httptest.NewRecorder()
				h.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "SOLD_OUT") {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// FuzzCompiledGrabAnswersAsGqlgen sends any body to the twin handlers of
// TestCompiledGrabAnswersAsGqlgen: whichever path answers, a client must
// not be able to tell them apart.
func FuzzCompiledGrabAnswersAsGqlgen(f *testing.F) {
	tokens, user := twinUser(f)
	compiled, gqlgen := twinHandlers(f, tokens, 0)
	for _, seed := range []string{
		body(`mutation($v: ID!) { seckillVoucher(voucherId: $v) { code orderId message } }`, map[string]any{"v": "1"}),
		body(`mutation Grab($v: ID!, $r: String, $t: String) { seckillVoucher(voucherId: $v, requestId: $r, ticket: $t) { __typename message code orderId } }`, map[string]any{"v": "9", "r": "k", "t": "forged"}, "operationName", "Grab"),
		body(`mutation { g: seckillVoucher(voucherId: 7) { c: code } }`, nil),
		`{"query":"mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }","variables":{"v":1e0}}`,
		`{"query":"mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }","variables":{"v":"2","v":"99"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := twinRequest{body: string(b), authorization: "Bearer " + user}
		sameAnswer(t, send(compiled, req), send(gqlgen, req))
	})
}
