package httpapi_test

import (
	"strings"
	"testing"

	"flashsale/internal/auth"
	"flashsale/testkit/nodetest"
)

func TestExpensiveRequestsAreRejected(t *testing.T) {
	t.Parallel()
	s := nodetest.Start(t, nodetest.Options{})
	user := s.Token(t, 2, auth.RoleUser)
	deep := "{ __schema { types { fields { type" + strings.Repeat(" { ofType", 20) + " { name }" + strings.Repeat(" }", 20) + " } } } }"
	graphiql := "{ __schema { types { fields { type" + strings.Repeat(" { ofType", 9) + " { name }" + strings.Repeat(" }", 9) + " } } } }"
	s.MustDo(t, user, graphiql, nil, nil) // GraphiQL's own schema query is this deep
	var wide strings.Builder
	wide.WriteString("{")
	for i := 0; i < 40; i++ {
		wide.WriteString(" a")
		wide.WriteString(strings.Repeat("x", i%5+1))
		wide.WriteString(string(rune('a' + i%26)))
		wide.WriteString(strings.Repeat("y", i/26))
		wide.WriteString(": vouchers(first: 100) { edges { node { id title } } }")
	}
	wide.WriteString(" }")
	tooWide := "{ vouchers { edges { node { " + strings.Repeat("id ", 101) + "} } } }"
	manyTokens := "{ vouchers { edges { node { " + strings.Repeat("id ", 3000) + "} } } }"
	huge := "{ vouchers { edges { node { id } } } }" + strings.Repeat(" ", 70<<10)

	cases := []struct{ name, query, reason string }{
		{"too deep", deep, "DEPTH_LIMIT_EXCEEDED"},
		{"too complex", wide.String(), "COMPLEXITY_LIMIT_EXCEEDED"},
		{"too wide", tooWide, "SELECTION_TOO_WIDE"},
		{"too many tokens", manyTokens, ""},
		{"body too large", huge, ""},
		{"malformed", "{ vouchers { ", "GRAPHQL_PARSE_FAILED"},
		{"unknown field", "{ nope }", "GRAPHQL_VALIDATION_FAILED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := s.Do(t, user, tc.query, nil, nil)
			if len(errs) == 0 {
				t.Fatal("accepted")
			}
			e := errs[0]
			if e.Code() != "BAD_USER_INPUT" {
				t.Fatalf("code %q (%s), want BAD_USER_INPUT", e.Code(), e.Message)
			}
			if tc.reason != "" && e.Extensions["reason"] != tc.reason {
				t.Fatalf("reason %v, want %s", e.Extensions["reason"], tc.reason)
			}
		})
	}
}

func TestInternalErrorsHideTheirCause(t *testing.T) {
	t.Parallel()
	s := nodetest.Start(t, nodetest.Options{})
	user := s.Token(t, 2, auth.RoleUser)
	_ = s.DB.Close() // every query now fails inside database/sql
	e := nodetest.WantCode(t, s.Do(t, user, `{ voucher(id: "1") { id } }`, nil, nil), "INTERNAL")
	if e.Message != "internal error" {
		t.Fatalf("message %q leaks the cause", e.Message)
	}
}
