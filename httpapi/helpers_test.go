package httpapi_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/internal/node/nodetest"
)

// Helpers the graph package's tests have too (graph/cost_test.go,
// graph/introspect_test.go): they belong with the shared fixtures.

// cost is what one request cost the process on average: CPU time (user
// and system, every thread: gqlgen and the HTTP plumbing may use other
// goroutines) and bytes allocated.
type cost struct {
	cpu   time.Duration
	bytes uint64
}

func (c cost) String() string { return fmt.Sprintf("%v CPU, %d KB", c.cpu, c.bytes>>10) }

// measure runs fn n times, three rounds, and keeps the cheapest round's
// average: the machine is shared and noisy, and noise only ever adds.
func measure(tb testing.TB, n int, fn func(i int)) cost {
	tb.Helper()
	best := cost{cpu: time.Hour, bytes: 1 << 62}
	for round := range 3 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		alloc := ms.TotalAlloc
		before := cpuTime(tb)
		for i := range n {
			fn(round*n + i)
		}
		c := cost{cpu: (cpuTime(tb) - before) / time.Duration(n)}
		runtime.ReadMemStats(&ms)
		c.bytes = (ms.TotalAlloc - alloc) / uint64(n)
		best.cpu, best.bytes = min(best.cpu, c.cpu), min(best.bytes, c.bytes)
	}
	return best
}

func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// withLongTexts fills n's catalog with count vouchers whose subTitle and
// rules are as long as allowed: the worst case for an answer's size.
func withLongTexts(tb testing.TB, n *nodetest.Node, count int) {
	tb.Helper()
	text := strings.Repeat("x", domain.MaxTextLen)
	for i := range count {
		_, err := n.Catalog.Create(context.Background(), domain.NewVoucher{
			ShopID: 7, Title: fmt.Sprintf("voucher %d", i), SubTitle: &text, Rules: &text,
			PayValue: 100, ActualValue: 500, Type: domain.VoucherNormal,
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// graphiqlIntrospection is GraphiQL's schema query (graphql-js
// getIntrospectionQuery with every option on): the largest query a
// legitimate client sends, which the shape check must let through.
var graphiqlIntrospection = `query IntrospectionQuery {
  __schema {
    description
    queryType { name kind }
    mutationType { name kind }
    subscriptionType { name kind }
    types { ...FullType }
    directives { name description isRepeatable locations args(includeDeprecated: true) { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description specifiedByURL isOneOf
  fields(includeDeprecated: true) {
    name description
    args(includeDeprecated: true) { ...InputValue }
    type { ...TypeRef }
    isDeprecated deprecationReason
  }
  inputFields(includeDeprecated: true) { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue {
  name description type { ...TypeRef } defaultValue isDeprecated deprecationReason
}
fragment TypeRef on __Type {
  kind name` + strings.Repeat(` ofType { kind name`, 9) + strings.Repeat(` }`, 9) + `
}`
