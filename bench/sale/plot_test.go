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

func TestQueueTimelineAndPlot(t *testing.T) {
	open := ms(0)
	var adm []time.Time
	var outs []Outcome
	var samples []waitSample
	for i := range 100 {
		adm = append(adm, ms(100*i))
		outs = append(outs, Outcome{User: i, Code: "OK", Sent: ms(100*i + 50), Latency: 5 * time.Millisecond})
		samples = append(samples, waitSample{ms(100 * i), 1000 - 10*i})
	}
	tl := QueueTimeline(open, adm, outs, samples, time.Second)
	if len(tl) != 10 || tl[0].AdmitPerSecond != 10 || tl[0].OKPerSecond != 10 || tl[0].Waiting != 910 || tl[9].Waiting != 10 {
		t.Fatalf("timeline %+v", tl)
	}
	var b bytes.Buffer
	rep := &Report{Target: "service", Scenario: Queue, Expect: Expect{Stock: 100},
		Queue: &QueueReport{Early: 10, Late: 90, AdmitPerSecond: 10, MaxActive: 5, Open: open, Begin: ms(2000), Timeline: tl}}
	if err := PlotQueue(&b, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
}
