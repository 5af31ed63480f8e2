package sale

import (
	"bytes"
	"image/png"
	"testing"
	"time"
)

func TestPlotDrawsAPNGWithAColumnPerScenario(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var outs []Outcome
	for i := range 100 {
		outs = append(outs, Outcome{Sent: t0.Add(time.Duration(i) * 10 * time.Millisecond), Latency: time.Duration(i) * time.Millisecond})
	}
	tl := Timeline(outs, 100*time.Millisecond)
	reps := []*Report{
		{Target: "service", Scenario: SoldOut, Timeline: tl},
		{Target: "reference", Scenario: SoldOut, Timeline: tl},
		{Target: "service", Scenario: InStock, Timeline: tl},
	}
	var b bytes.Buffer
	if err := Plot(&b, reps); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w <= h {
		t.Errorf("%dx%d: two scenario columns should make it wider than tall", w, h)
	}
}
