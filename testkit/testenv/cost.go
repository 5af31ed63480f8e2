package testenv

import (
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cost is what one request cost the process on average: CPU time (user
// and system, every thread: gqlgen and the HTTP plumbing may use other
// goroutines) and bytes allocated.
type Cost struct {
	CPU   time.Duration
	Bytes uint64
}

func (c Cost) String() string { return fmt.Sprintf("%v CPU, %d KB", c.CPU, c.Bytes>>10) }

// Measure runs fn n times, three rounds, and keeps the cheapest round's
// average: the machine is shared and noisy, and noise only ever adds.
func Measure(tb testing.TB, n int, fn func(i int)) Cost {
	tb.Helper()
	best := Cost{CPU: time.Hour, Bytes: 1 << 62}
	for round := range 3 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		alloc := ms.TotalAlloc
		before := CPUTime(tb)
		for i := range n {
			fn(round*n + i)
		}
		c := Cost{CPU: (CPUTime(tb) - before) / time.Duration(n)}
		runtime.ReadMemStats(&ms)
		c.Bytes = (ms.TotalAlloc - alloc) / uint64(n)
		best.CPU, best.Bytes = min(best.CPU, c.CPU), min(best.Bytes, c.Bytes)
	}
	return best
}

// CPUTime is the CPU time this process has used, user and system.
func CPUTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// GraphiQLIntrospection is GraphiQL's schema query (graphql-js
// getIntrospectionQuery with every option on): the largest query a
// legitimate client sends, which the shape check must let through.
var GraphiQLIntrospection = `query IntrospectionQuery {
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
