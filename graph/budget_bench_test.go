package graph_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// BenchmarkBudgetProbes measures what each hostile probe of the request
// budgets costs the process, in process through the whole handler: CPU per
// request from getrusage (every thread, reported as cpu-ms/op beside
// ns/op) and bytes allocated. Each request carries a fresh comment so
// that no cache answers it, except where the probe is the cache.
func BenchmarkBudgetProbes(b *testing.B) {
	s := newServer(b)
	user := s.token(b, 2, auth.RoleUser)
	var aliases, unknown strings.Builder
	aliases.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&aliases, " a%d: __schema { types { name fields { name args { name } } } }", i)
	}
	aliases.WriteString(" }")
	unknown.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&unknown, " x%d", i)
	}
	unknown.WriteString(" }")
	var args strings.Builder
	for i := range 660 {
		fmt.Fprintf(&args, " a%d: 1", i)
	}
	filler16 := strings.Repeat("z", 16<<10)
	filler60 := strings.Repeat("p", 60<<10)
	probes := []struct {
		name, token string
		query       func(i int) string
		apq         bool
	}{
		{"GraphiQL introspection, no token", "", func(i int) string { return fmt.Sprintf("#%d\n%s", i, testenv.GraphiQLIntrospection) }, false},
		{"GraphiQL introspection, the same text", "", func(int) string { return testenv.GraphiQLIntrospection }, false},
		{"100 aliases of __schema types fields args, no token", "", func(i int) string { return fmt.Sprintf("#%d\n%s", i, aliases.String()) }, false},
		{"990 unknown directives, no token", "", func(i int) string { return fmt.Sprintf("#%d\n{ __typename%s }", i, strings.Repeat(" @x", 990)) }, false},
		{"660 unknown arguments, user token", user, func(i int) string {
			return fmt.Sprintf("#%d\n{ vouchers(%s) { pageInfo { hasNextPage } } }", i, args.String())
		}, false},
		{"100 unknown fields (10 errors and a count), user token", user, func(i int) string { return fmt.Sprintf("#%d\n%s", i, unknown.String()) }, false},
		{"distinct 16 KB document, no token", "", func(i int) string { return fmt.Sprintf("# %d %s\n{ __schema { queryType { name } } }", i, filler16) }, false},
		{"60 KB persisted-query registration, no token", "", func(i int) string { return fmt.Sprintf("# %d %s\n{ __typename }", i, filler60) }, true},
	}
	for _, p := range probes {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			start := testenv.CPUTime(b)
			n := 0
			for b.Loop() {
				q := p.query(n)
				if p.apq {
					postAPQ(b, s.handler, p.token, sha(q), q)
				} else {
					errorsOf(b, s.handler, p.token, q)
				}
				n++
			}
			b.ReportMetric(float64(testenv.CPUTime(b)-start)/float64(time.Millisecond)/float64(n), "cpu-ms/op")
		})
	}
}
