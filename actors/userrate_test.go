package actors

import (
	"testing"
	"time"
)

// TestUserRatesFollowRedisRate checks the in-memory limit against what
// redis_rate.PerSecond(rate) admits: a burst of rate grabs at once, then
// one per 1/rate, a retry-after up to the next one, users apart, and a
// map that forgets users once their burst is paid back.
func TestUserRatesFollowRedisRate(t *testing.T) {
	const rate = 4 // interval 250 ms, burst 4
	u := newUserRates(rate)
	now := time.Unix(1_700_000_000, 0).UnixNano()
	for i := range rate {
		if wait := u.take(1, now); wait != 0 {
			t.Fatalf("grab %d of the burst refused (wait %v)", i+1, wait)
		}
	}
	if wait := u.take(1, now); wait != 250*time.Millisecond {
		t.Fatalf("grab past the burst: wait %v, want 250ms", wait)
	}
	if wait := u.take(1, now+int64(100*time.Millisecond)); wait != 150*time.Millisecond {
		t.Fatalf("100 ms later: wait %v, want 150ms", wait)
	}
	if wait := u.take(2, now); wait != 0 {
		t.Fatalf("another user refused (wait %v)", wait)
	}
	if wait := u.take(1, now+int64(250*time.Millisecond)); wait != 0 {
		t.Fatalf("one interval later: refused (wait %v)", wait)
	}
	if wait := u.take(1, now+int64(250*time.Millisecond)); wait == 0 {
		t.Fatal("a second grab in the same interval admitted")
	}
	// Two seconds on, both users' bursts are paid back: the sweep forgets
	// them, and the next grab starts a full burst again.
	later := now + int64(2*time.Second)
	if wait := u.take(3, later); wait != 0 {
		t.Fatalf("user 3: wait %v", wait)
	}
	if len(u.tat) != 1 {
		t.Fatalf("%d users remembered after the sweep, want 1", len(u.tat))
	}
	for i := range rate {
		if wait := u.take(1, later); wait != 0 {
			t.Fatalf("after the pause, grab %d of a new burst refused (wait %v)", i+1, wait)
		}
	}
	if newUserRates(0) != nil {
		t.Fatal("a zero rate is not off")
	}
}
