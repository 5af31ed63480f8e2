package sale

import (
	"math"
	"sort"
	"time"
)

// Latencies summarises how long answers took.
type Latencies struct {
	P50 time.Duration `json:"p50"`
	P90 time.Duration `json:"p90"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest value with at least p% of the values at or below
// it. Zero for no values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Summarize sorts ds in place and returns its percentiles.
func Summarize(ds []time.Duration) Latencies {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) == 0 {
		return Latencies{}
	}
	return Latencies{
		P50: Percentile(ds, 50),
		P90: Percentile(ds, 90),
		P99: Percentile(ds, 99),
		Max: ds[len(ds)-1],
	}
}

// Bucket is one slice of the run's timeline.
type Bucket struct {
	// At is the slice's start, from the first request.
	At  time.Duration `json:"at"`
	RPS float64       `json:"rps"`
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
}

// TimelineWidth is the slice width of a timeline of an attack that took
// elapsed: about 40 slices, each at least 10 ms, so that an attack of a
// few thousand users, over in under a second, still draws a curve of some
// 40 points rather than a handful.
func TimelineWidth(elapsed time.Duration) time.Duration {
	return max(10*time.Millisecond, (elapsed / 40).Round(10*time.Millisecond))
}

// MinPlotPoints is the fewest timeline slices a plot draws as a curve
// without saying it has too few.
const MinPlotPoints = 10

// Timeline cuts the outcomes into slices of width by when their answer
// came and returns each slice's answers per second and latencies.
func Timeline(outs []Outcome, width time.Duration) []Bucket {
	if len(outs) == 0 || width <= 0 {
		return nil
	}
	start := outs[0].Sent
	for _, o := range outs {
		if o.Sent.Before(start) {
			start = o.Sent
		}
	}
	var slices [][]time.Duration
	var end time.Duration
	for _, o := range outs {
		at := o.Sent.Add(o.Latency).Sub(start)
		end = max(end, at)
		i := int(at / width)
		for len(slices) <= i {
			slices = append(slices, nil)
		}
		slices[i] = append(slices[i], o.Latency)
	}
	buckets := make([]Bucket, len(slices))
	for i, ds := range slices {
		l := Summarize(ds)
		at := time.Duration(i) * width
		// The last slice ends with the last answer, not a full width.
		w := min(width, end-at)
		if w <= 0 {
			w = width
		}
		buckets[i] = Bucket{At: at, RPS: float64(len(ds)) / w.Seconds(), P50: l.P50, P99: l.P99}
	}
	return buckets
}
