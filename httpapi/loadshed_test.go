package httpapi

import (
	"testing"
	"time"
)

type fakeGauge struct {
	queued  int
	latency time.Duration
}

func (g *fakeGauge) Load() (int, time.Duration) { return g.queued, g.latency }

// Shedding starts at a threshold and ends only once the load has been
// under half of each threshold for shedCooldown, so it does not flap with
// every batch.
func TestLoadSheddingHasHysteresis(t *testing.T) {
	t.Cleanup(func() { sheddingGauge.Set(0) }) // the metric is the process's
	g := &fakeGauge{}
	now := time.Unix(1000, 0)
	s := newLoadShedder(LoadShedding{Gauge: g, QueueDepth: 100, GrabLatency: 200 * time.Millisecond})
	s.now = func() time.Time { return now }
	step := func(queued int, latency time.Duration, advance time.Duration, want bool) {
		t.Helper()
		now = now.Add(advance)
		g.queued, g.latency = queued, latency
		if got := s.shedding(); got != want {
			t.Fatalf("queued %d, latency %v, at +%v: shedding %v, want %v", queued, latency, now.Sub(time.Unix(1000, 0)), got, want)
		}
	}
	step(99, 199*time.Millisecond, 0, false)               // under both thresholds
	step(100, 0, time.Millisecond, true)                   // queue threshold
	step(60, 0, time.Millisecond, true)                    // between half and full: still on
	step(10, 10*time.Millisecond, time.Millisecond, true)  // calm
	step(10, 10*time.Millisecond, shedCooldown/2, true)    // not calm long enough
	step(10, 150*time.Millisecond, time.Millisecond, true) // latency over half: busy again
	step(10, 10*time.Millisecond, shedCooldown-time.Millisecond, true)
	step(10, 10*time.Millisecond, time.Millisecond, false) // a whole cooldown calm: off
	step(0, 250*time.Millisecond, time.Millisecond, true)  // latency threshold
	step(0, 0, time.Hour, false)                           // a quiet spell: off at the first look
	if newLoadShedder(LoadShedding{Gauge: g}) != nil || newLoadShedder(LoadShedding{QueueDepth: 1}) != nil {
		t.Fatal("shedding without a threshold or a gauge must be off")
	}
}
