package graph_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// costProbe is one request of the measured attacks on the request
// budget: with a user token or none, each request a fresh text (a
// comment) so that no cache answers it.
type costProbe struct {
	name      string
	anonymous bool
	body      func(i int) map[string]any
}

// costProbes are the requests measured from outside to cost a node
// 5-70 ms of CPU and up to 24 MB each, and the heaviest page a shop's
// frontend may load in one request (80 vouchers, every field).
func costProbes() []costProbe {
	long600 := func(i, j int) string { return fmt.Sprintf("f%d_%d_%s", i, j, strings.Repeat("q", 600)) }
	query := func(q func(i int) string) func(i int) map[string]any {
		return func(i int) map[string]any { return map[string]any{"query": fmt.Sprintf("# %d\n%s", i, q(i))} }
	}
	page := "vouchers(first: 100) { edges { node { id title subTitle rules } } }"
	allFields := "edges { cursor node { id shopId title payValue actualValue type status createdAt seckill { initialStock remaining beginAt endAt perUserLimit } } } pageInfo { hasNextPage endCursor }"
	return []costProbe{
		{"a page of 100 long texts", false, query(func(int) string { return "{ " + page + " }" })},
		{"5 aliases of it", false, query(func(int) string { return aliases(5, page) })},
		{"8 aliases of it", false, query(func(int) string { return aliases(8, page) })},
		{"60 KB of unknown 600-character fields", false, query(func(i int) string {
			var b strings.Builder
			b.WriteString("{")
			for j := 0; b.Len() < 60<<10; j++ {
				b.WriteString(" " + long600(i, j))
			}
			return b.String() + " }"
		})},
		{"100 variables of unknown 600-character types, no token", true, query(func(i int) string {
			var b strings.Builder
			b.WriteString("query(")
			for j := range 100 {
				fmt.Fprintf(&b, "$v%d: %s ", j, long600(i, j))
			}
			return b.String() + ") { __typename }"
		})},
		{"unknown 600-character fields in introspection, no token", true, query(func(i int) string {
			var b strings.Builder
			b.WriteString("{ __schema {")
			for j := range 80 {
				b.WriteString(" " + long600(i, j))
			}
			return b.String() + " } }"
		})},
		{"13 aliases of __schema", false, query(func(int) string {
			return aliases(13, "__schema { types { name fields { name args { name type { name } } } } }")
		})},
		{"the heaviest page admitted", false, query(func(int) string { return "{ vouchers(first: 80) { " + allFields + " } }" })},
	}
}

// request is the probe's i-th request, with token unless anonymous.
func (p costProbe) request(token string, i int) *http.Request {
	body, _ := json.Marshal(p.body(i))
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if !p.anonymous {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// No request makes the node allocate more than 1 MiB, whatever it asks
// and whatever its texts: each is priced before it runs and refused when
// it would cost more (the CPU side is BenchmarkRequestCosts: this test
// counts bytes, which do not depend on the machine's load).
//
// Not parallel: it measures the process's allocation while it runs.
func TestNoRequestAllocatesMoreThan1MiB(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates two to three times as much; scripts/test.sh runs this without it")
	}
	s := newServer(t)
	s.node.WithLongTexts(t, 100)
	user := s.token(t, 2, auth.RoleUser)
	for _, p := range costProbes() {
		t.Run(p.name, func(t *testing.T) {
			least := ^uint64(0)
			for i := range 5 {
				req, rec := p.request(user, i), httptest.NewRecorder()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s.handler.ServeHTTP(rec, req)
				runtime.ReadMemStats(&after)
				least = min(least, after.TotalAlloc-before.TotalAlloc)
			}
			t.Logf("%d KB", least>>10)
			if least > 1<<20 {
				t.Fatalf("allocated %d KB, want at most 1 MiB", least>>10)
			}
		})
	}
}

// BenchmarkRequestCosts measures the CPU (every thread, cpu-ms/op) and
// the allocation of each costProbe through the whole handler, the
// building of each request included; the bound is 5 ms and 1 MB each.
func BenchmarkRequestCosts(b *testing.B) {
	s := newServer(b)
	s.node.WithLongTexts(b, 100)
	user := s.token(b, 2, auth.RoleUser)
	for _, p := range costProbes() {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			start := testenv.CPUTime(b)
			n := 0
			for b.Loop() {
				s.handler.ServeHTTP(httptest.NewRecorder(), p.request(user, n))
				n++
			}
			b.ReportMetric(float64(testenv.CPUTime(b)-start)/float64(time.Millisecond)/float64(n), "cpu-ms/op")
		})
	}
}
