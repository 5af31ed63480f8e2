package sale

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		ds := make([]time.Duration, len(ns))
		for i, n := range ns {
			ds[i] = time.Duration(n) * time.Millisecond
		}
		return ds
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"no values is zero", nil, 50, 0},
		{"one value is every percentile", ms(7), 99, 7 * time.Millisecond},
		{"median of an odd count is the middle", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"median of an even count is the lower middle", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"a rank between two values takes the upper", ms(1, 2, 3, 4), 60, 3 * time.Millisecond},
		{"p90 of 1..100 is 90", ms(hundred...), 90, 90 * time.Millisecond},
		{"p99 of 1..100 is 99", ms(hundred...), 99, 99 * time.Millisecond},
		{"p99 of ten values is the largest", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"p100 is the maximum", ms(1, 5, 9), 100, 9 * time.Millisecond},
		{"a tiny p is the minimum", ms(1, 5, 9), 0.1, 1 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.sorted, tc.p, got, tc.want)
			}
		})
	}
}

func TestSummarizeSortsAndReportsTheTail(t *testing.T) {
	ds := []time.Duration{30, 10, 20, 50, 40}
	got := Summarize(ds)
	want := Latencies{P50: 30, P90: 50, P99: 50, Max: 50}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
}

func TestTimelineCountsAnswersPerSliceByWhenTheyCame(t *testing.T) {
	t0 := time.Unix(1000, 0)
	outs := []Outcome{
		{Sent: t0, Latency: 10 * time.Millisecond},
		{Sent: t0.Add(50 * time.Millisecond), Latency: 10 * time.Millisecond},
		{Sent: t0.Add(90 * time.Millisecond), Latency: 20 * time.Millisecond},  // answered at 110 ms
		{Sent: t0.Add(150 * time.Millisecond), Latency: 50 * time.Millisecond}, // answered at 200 ms: the last
	}
	got := Timeline(outs, 100*time.Millisecond)
	if len(got) != 3 {
		t.Fatalf("%d slices, want 3: %+v", len(got), got)
	}
	if got[0].RPS != 20 || got[1].RPS != 10 {
		t.Errorf("rps %v, %v; want 20 (2 in 100 ms), 10", got[0].RPS, got[1].RPS)
	}
	if got[1].P99 != 20*time.Millisecond {
		t.Errorf("second slice p99 %v, want 20ms", got[1].P99)
	}
}

// An attack over in under a second still gets a timeline of enough points
// to draw a curve; a long one keeps slices of about a fortieth of it.
func TestTimelineWidthGivesShortAttacksACurve(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, elapsed := range []time.Duration{400 * time.Millisecond, 900 * time.Millisecond, 20 * time.Second} {
		var outs []Outcome
		for at := time.Duration(0); at < elapsed; at += time.Millisecond {
			outs = append(outs, Outcome{Sent: t0.Add(at), Latency: time.Millisecond})
		}
		if n := len(Timeline(outs, TimelineWidth(elapsed))); n < MinPlotPoints || n > 50 {
			t.Errorf("an attack of %s: %d points, want %d to 50", elapsed, n, MinPlotPoints)
		}
	}
}

// Progress into a file or a pipe is plain lines: a bar redrawn with
// carriage returns is for terminals only.
func TestProgressIsPlainLinesOffATerminal(t *testing.T) {
	var out strings.Builder
	var done, ok atomic.Int64
	done.Store(40)
	ok.Store(3)
	stop := progress(Config{Progress: &out, Endpoint: Endpoint{Name: "service"}, Scenario: "sold-out"}, 100, time.Now(), &done, &ok)
	stop()
	if got := out.String(); strings.Contains(got, "\r") || !strings.HasSuffix(got, "\n") || !strings.Contains(got, "service sold-out: 40/100  OK 3") {
		t.Fatalf("progress off a terminal: %q", got)
	}
}
