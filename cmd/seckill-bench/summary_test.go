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
		{Target: "ceiling-graphql", Scenario: "sold-out", RPS: 16000, Latency: sale.Latencies{P99: 6 * time.Millisecond}},
		{Target: "reference", Scenario: "in-stock", RPS: 8000, OK: 1000, Elapsed: time.Second, DBLag: cpu(9 * time.Second)},
		{Target: "service", Scenario: "in-stock", RPS: 4000, OK: 1000, Elapsed: 2 * time.Second, DBLag: cpu(500 * time.Millisecond)},
	}
	want := []string{
		"sold-out: service/reference rps 0.50×, p99 2.00×, cpu/req 2.00×",
		"sold-out: service/ceiling rps 0.25×, p99 4.00×",
		"sold-out: service/ceiling-graphql rps 0.31×, p99 3.33×",
		// The contract's bytes against the plain ceiling; no other pair.
		"sold-out: ceiling-graphql/ceiling rps 0.80×, p99 1.20×",
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

// Over several rounds the service is compared with each target of the
// same round only, and each pair gets its medians over the rounds.
func TestRatiosOverRoundsPairWithinARoundAndTakeMedians(t *testing.T) {
	cpu := func(d time.Duration) *time.Duration { return &d }
	rep := func(target string, round int, rps float64, p99, machine time.Duration) *sale.Report {
		return &sale.Report{Target: target, Scenario: "in-stock", Round: round, RPS: rps,
			Latency: sale.Latencies{P99: p99}, MachineCPUPerRequest: cpu(machine)}
	}
	ms, us := time.Millisecond, time.Microsecond
	reps := []*sale.Report{
		rep("service", 1, 9000, 10*ms, 200*us), rep("reference", 1, 10000, 10*ms, 100*us),
		rep("reference", 2, 6000, 20*ms, 200*us), rep("service", 2, 9000, 10*ms, 200*us),
		rep("service", 3, 3000, 40*ms, 400*us), rep("reference", 3, 5000, 20*ms, 200*us),
	}
	want := []string{
		"in-stock round 1: service/reference rps 0.90×, p99 1.00×, machine cpu/req 2.00×",
		"in-stock round 2: service/reference rps 1.50×, p99 0.50×, machine cpu/req 1.00×",
		"in-stock round 3: service/reference rps 0.60×, p99 2.00×, machine cpu/req 2.00×",
		"in-stock: service/reference median of 3 rounds: rps 0.90×, p99 1.00×, machine cpu/req 2.00×",
	}
	if got := ratios(reps); !reflect.DeepEqual(got, want) {
		t.Errorf("ratios:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Every other round runs the targets in reverse, so no target always
// meets the machine first.
func TestRoundsAlternateTheTargetsOrder(t *testing.T) {
	eps := []sale.Endpoint{{Name: "service"}, {Name: "reference"}, {Name: "ceiling"}}
	names := func(es []sale.Endpoint) string {
		var out []string
		for _, e := range es {
			out = append(out, e.Name)
		}
		return strings.Join(out, ",")
	}
	for round, want := range map[int]string{1: "service,reference,ceiling", 2: "ceiling,reference,service", 3: "service,reference,ceiling"} {
		if got := names(roundOrder(eps, round)); got != want {
			t.Errorf("round %d: %s, want %s", round, got, want)
		}
	}
	if names(eps) != "service,reference,ceiling" {
		t.Errorf("roundOrder changed its argument: %s", names(eps))
	}
}
