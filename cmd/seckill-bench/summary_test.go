package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"flashsale/bench/sale"
)

func TestRatiosCompareTheServiceWithEachReferencePerScenario(t *testing.T) {
	cpu := func(d time.Duration) *time.Duration { return &d }
	reps := []*sale.Report{
		{Target: "service", Scenario: "sold-out", RPS: 5000, Latency: sale.Latencies{P99: 20 * time.Millisecond}, CPUPerRequest: cpu(80 * time.Microsecond)},
		{Target: "reference", Scenario: "sold-out", RPS: 10000, Latency: sale.Latencies{P99: 10 * time.Millisecond}, CPUPerRequest: cpu(40 * time.Microsecond)},
		{Target: "ceiling", Scenario: "sold-out", RPS: 20000, Latency: sale.Latencies{P99: 5 * time.Millisecond}},
		{Target: "reference", Scenario: "in-stock", RPS: 8000, OK: 1000, Elapsed: time.Second, DBLag: cpu(9 * time.Second)},
		{Target: "service", Scenario: "in-stock", RPS: 4000, OK: 1000, Elapsed: 2 * time.Second, DBLag: cpu(500 * time.Millisecond)},
	}
	want := []string{
		"sold-out: service/reference rps 0.50×, p99 2.00×, cpu/req 2.00×",
		"sold-out: service/ceiling rps 0.25×, p99 4.00×",
		// 1000 orders stored 2.5 s after the start against 10 s.
		"in-stock: service/reference rps 0.50×, p99 0.00×, durable orders/s 4.00×",
	}
	if got := ratios(reps); !reflect.DeepEqual(got, want) {
		t.Errorf("ratios:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSummaryNamesEveryViolation(t *testing.T) {
	reps := []*sale.Report{{Target: "service", Scenario: "mixed", Requests: 10,
		Violations: []sale.Violation{{Rule: "oversell", Detail: "11 OK answers for 10 units"}}}}
	var b bytes.Buffer
	printSummary(&b, reps)
	for _, s := range []string{"1 VIOLATIONS", "VIOLATION oversell: 11 OK answers for 10 units"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, b.String())
		}
	}
}
