package main

import (
	"bytes"
	"io"
	"os"
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

func TestSummaryShowsTheWaitingRoom(t *testing.T) {
	admitted := 1000
	reps := []*sale.Report{{Target: "service", Scenario: sale.Queue, Requests: 50000, OK: 1000, Expect: sale.Expect{Stock: 1000},
		Queue: &sale.QueueReport{Early: 5000, Late: 15000, AdmitPerSecond: 200, MaxActive: 300, JoinedEarly: 5000,
			Admitted: &admitted, AdmittedEarly: 1000, AdmitRate: 77.4, MostOpen: 300, NoticeBound: time.Second,
			Notice: sale.Notices{Timed: 72, After: 114, Latency: sale.Latencies{P50: 34 * time.Millisecond, Max: 35 * time.Millisecond}},
			Polls:  52143, PollErrors: 3, PollErrorCodes: map[string]int{"error:UNAVAILABLE": 2, "transport-error": 1}}}}
	var b bytes.Buffer
	printSummary(&b, reps)
	for _, s := range []string{
		"5000 early + 15000 late users",
		"admitted 1000 (early 1000, late 0) at 77.4/s first to last (pace 200/s); most tickets open at once 300 (maxActive 300",
		"sold 1000 of 1000; SOLD_OUT heard by 72 subscribers waiting then",
		"max 35.0ms (bound 1s); 114 subscribed after it",
		"52143 polls (3 failed: error:UNAVAILABLE 2, transport-error 1)",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, b.String())
		}
	}
}

func TestPlotsPutTheWaitingRoomInAFileOfItsOwn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var outs []sale.Outcome
	for i := range 50 {
		outs = append(outs, sale.Outcome{Code: "OK", Sent: t0.Add(time.Duration(i) * 20 * time.Millisecond), Latency: time.Millisecond})
	}
	grabs := &sale.Report{Target: "service", Scenario: sale.SoldOut, Timeline: sale.Timeline(outs, 100*time.Millisecond)}
	queue := &sale.Report{Target: "service", Scenario: sale.Queue, Queue: &sale.QueueReport{Open: t0, Begin: t0.Add(time.Second),
		Timeline: sale.QueueTimeline(t0, nil, outs, nil, 100*time.Millisecond)}}
	for _, tc := range []struct {
		name  string
		reps  []*sale.Report
		files []string
	}{
		{"the waiting room alone", []*sale.Report{queue}, []string{"p.png"}},
		{"beside a grab scenario", []*sale.Report{grabs, queue}, []string{"p-queue.png", "p.png"}}, // as ReadDir sorts them
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			if err := plots(sub+"/p.png", tc.reps, io.Discard); err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(sub)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if !reflect.DeepEqual(got, tc.files) {
				t.Errorf("files %v, want %v", got, tc.files)
			}
		})
	}
}
