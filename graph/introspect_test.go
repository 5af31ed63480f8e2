package graph_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/prometheus/client_golang/prometheus"

	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/testenv"
)

// answer posts one operation with variables and returns the status and
// the body.
func answer(tb testing.TB, h http.Handler, token, query string, vars map[string]any) (int, []byte) {
	tb.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// introspectionQueries are introspection operations of every shape the
// model must answer as gqlgen does: GraphiQL's, aliases, merged fields,
// fragments on each introspection type, @skip and @include from
// variables, __typename at every level, __type by name (known, unknown,
// from a variable), with and without deprecated members.
var introspectionQueries = []struct {
	name, query string
	vars        map[string]any
}{
	{"GraphiQL", testenv.GraphiQLIntrospection, nil},
	{"types, fields and args", `{ __schema { types { name fields { name args { name } } } } }`, nil},
	{"aliases and merged fields", `{ a: __schema { queryType { name } } a: __schema { queryType { kind fields { name } } } b: __schema { types { n: name k: kind } } }`, nil},
	{"typenames everywhere", `{ __typename __schema { __typename types { __typename name fields(includeDeprecated: true) { __typename args { __typename type { __typename ofType { __typename name } } } } enumValues { __typename name } } directives { __typename name locations args { __typename name defaultValue } } } }`, nil},
	{"fragments and inline fragments", `query { __schema { ...S } } fragment S on __Schema { types { ... on __Type { name } ...T } mutationType { ...T } subscriptionType { name } } fragment T on __Type { kind possibleTypes { name } interfaces { name } inputFields { name type { kind name ofType { kind name ofType { kind name } } } defaultValue } }`, nil},
	{"skip and include from variables", `query($yes: Boolean!, $no: Boolean!) { __schema { types { name @include(if: $yes) kind @skip(if: $yes) fields @include(if: $no) { name } description @skip(if: $no) } } }`, map[string]any{"yes": true, "no": false}},
	{"__type by name, known and unknown", `{ v: __type(name: "Voucher") { name kind fields { name type { kind ofType { kind name } } } } q: __type(name: "Query") { fields { name args { name defaultValue type { name kind ofType { name } } } } } x: __type(name: "Nope") { name } e: __type(name: "__TypeKind") { enumValues(includeDeprecated: true) { name isDeprecated deprecationReason } } }`, nil},
	{"__type from a variable", `query($n: String!) { __type(name: $n) { name description specifiedByURL isOneOf inputFields { name isDeprecated deprecationReason } } __typename }`, map[string]any{"n": "CreateVoucherInput"}},
	{"every scalar", `{ __schema { description types { name specifiedByURL isOneOf } } }`, nil},
}

// gqlgenOnly is gqlgen's own handler for the same schema, with
// introspection on and nothing of ours in front: the reference.
func gqlgenOnly(s *testServer) http.Handler {
	srv := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: &graph.Resolver{Catalog: s.catalog}}))
	srv.AddTransport(transport.POST{})
	srv.Use(extension.Introspection{})
	return srv
}

// Introspection is answered from the model of the schema with the very
// bytes gqlgen's executor answers, for every shape of operation; and
// each one is counted as answered by the model, never left to the
// executor.
func TestIntrospectionAnswersAsGqlgen(t *testing.T) {
	s := newServer(t)
	ref := gqlgenOnly(s)
	answered := introspectionCounter("answered")
	for _, tc := range introspectionQueries {
		t.Run(tc.name, func(t *testing.T) {
			before := answered.value(t)
			_, want := answer(t, ref, "", tc.query, tc.vars)
			if bytes.Contains(want, []byte(`"errors"`)) {
				t.Fatalf("the reference answered errors: %.300s", want)
			}
			status, got := answer(t, s.handler, "", tc.query, tc.vars)
			if status != http.StatusOK || !bytes.Equal(got, want) {
				t.Fatalf("status %d\ngot  %.400s\nwant %.400s", status, got, want)
			}
			if n := answered.value(t) - before; n != 1 {
				t.Fatalf("%v operations answered from the model, want 1", n)
			}
		})
	}
	t.Run("the same text again: the answer kept", func(t *testing.T) {
		kept := introspectionCounter("kept")
		before, keptBefore := answered.value(t), kept.value(t)
		_, want := answer(t, ref, "", testenv.GraphiQLIntrospection, nil)
		if _, got := answer(t, s.handler, "", testenv.GraphiQLIntrospection, nil); !bytes.Equal(got, want) {
			t.Fatalf("got  %.400s\nwant %.400s", got, want)
		}
		if a, k := answered.value(t)-before, kept.value(t)-keptBefore; a != 0 || k != 1 {
			t.Fatalf("%v written from the model, %v kept answers; want 0 and 1", a, k)
		}
	})
}

// introspectionCounter reads flashsale_graphql_introspection_total for
// one outcome.
type introspectionCounter string

func (c introspectionCounter) value(tb testing.TB) float64 {
	tb.Helper()
	return metricValue(tb, "flashsale_graphql_introspection_total", map[string]string{"outcome": string(c)})
}

// metricValue reads a counter or gauge of the default registry, the one
// whose labels include labels; 0 when there is none yet.
func metricValue(tb testing.TB, name string, labels map[string]string) float64 {
	tb.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// Introspection is priced by the answer it would make, counted against
// the real schema: 100 aliases of one small selection (5 KB, every shape
// limit passed, 47,200 fields to answer) are refused before anything
// runs, and so is a single selection that would be over the limit once
// its lists are counted; GraphiQL's whole schema query passes. The
// refusal is the same with a token.
func TestIntrospectionIsPricedByItsAnswer(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	user := s.token(t, 2, auth.RoleUser)
	var aliases strings.Builder
	aliases.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&aliases, " a%d: __schema { types { name fields { name args { name } } } }", i)
	}
	aliases.WriteString(" }")
	small := s.sibling(t, map[string]string{"INTROSPECTION": string(graph.IntrospectionPublic)},
		node.Hooks{HTTP: func(o *httpapi.HandlerOptions) { o.Limits.MaxIntrospectionFields = 100 }}).handler
	for _, tc := range []struct {
		name, token, query string
		h                  http.Handler
		refused            bool
	}{
		{"100 aliases, no token", "", aliases.String(), s.handler, true},
		{"100 aliases, user token", user, aliases.String(), s.handler, true},
		{"GraphiQL's query", "", testenv.GraphiQLIntrospection, s.handler, false},
		{"one selection, within a limit of 100", "", `{ __schema { types { name } } }`, small, false},
		{"one selection over a limit of 100 once its lists are counted", "", `{ __schema { types { name fields { name } } } }`, small, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := errorsOf(t, tc.h, tc.token, tc.query)
			switch {
			case !tc.refused && len(errs) != 0:
				t.Fatalf("errors %+v", errs)
			case tc.refused && (len(errs) != 1 || errs[0].code() != "BAD_USER_INPUT" || errs[0].Extensions["reason"] != "INTROSPECTION_TOO_LARGE"):
				t.Fatalf("errors %+v, want one BAD_USER_INPUT with reason INTROSPECTION_TOO_LARGE", errs)
			}
		})
	}
}

// INTROSPECTION decides who may ask __schema and __type: nobody (off),
// callers with a valid token (token), anyone (public). __typename alone
// needs nothing in every mode, and __schema or __type asked beside other
// root fields is refused.
func TestIntrospectionModes(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	user := s.token(t, 2, auth.RoleUser)
	handlers := map[graph.IntrospectionMode]http.Handler{}
	for _, m := range []graph.IntrospectionMode{graph.IntrospectionOff, graph.IntrospectionToken, graph.IntrospectionPublic} {
		handlers[m] = s.sibling(t, map[string]string{"INTROSPECTION": string(m)}, node.Hooks{}).handler
	}
	const schema = `{ __schema { queryType { name } } }`
	for _, tc := range []struct {
		mode         graph.IntrospectionMode
		token, query string
		code         string
	}{
		{graph.IntrospectionOff, "", schema, "FORBIDDEN"},
		{graph.IntrospectionOff, user, schema, "FORBIDDEN"},
		{graph.IntrospectionOff, "", `{ __type(name: "Query") { name } }`, "FORBIDDEN"},
		{graph.IntrospectionOff, "", `{ __typename }`, ""},
		{graph.IntrospectionToken, "", schema, "UNAUTHENTICATED"},
		{graph.IntrospectionToken, "not-a-token", schema, "UNAUTHENTICATED"},
		{graph.IntrospectionToken, "", `{ ...F } fragment F on Query { __type(name: "Query") { name } }`, "UNAUTHENTICATED"},
		{graph.IntrospectionToken, user, schema, ""},
		{graph.IntrospectionToken, "", `{ __typename }`, ""},
		{graph.IntrospectionPublic, "", schema, ""},
		{graph.IntrospectionPublic, user, `{ __schema { queryType { name } } vouchers { pageInfo { hasNextPage } } }`, "BAD_USER_INPUT"},
		{graph.IntrospectionPublic, "", `{ __schema { queryType { name } } vouchers { pageInfo { hasNextPage } } }`, "UNAUTHENTICATED"},
	} {
		t.Run(fmt.Sprintf("%s %s token=%v", tc.mode, tc.query, tc.token != ""), func(t *testing.T) {
			errs := errorsOf(t, handlers[tc.mode], tc.token, tc.query)
			var codes []string
			for _, e := range errs {
				codes = append(codes, e.code())
			}
			if strings.Join(codes, ",") != tc.code {
				t.Fatalf("codes %v (%+v), want %q", codes, errs, tc.code)
			}
		})
	}
}
