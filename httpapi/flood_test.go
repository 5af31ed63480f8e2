package httpapi

import (
	"testing"
	"time"
)

// The flood limit admits a burst of two seconds' worth, then one request
// per 1/rate, and tells how long to wait; addresses do not share buckets.
func TestFloodShedderRefillsAtItsRate(t *testing.T) {
	if newFloodShedder(0) != nil {
		t.Fatal("rate 0 must be off")
	}
	f := newFloodShedder(10)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	for i := range 20 {
		if ok, _ := f.allow("a"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := f.allow("a")
	if ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("past the burst: ok %v, wait %v; want refused, wait up to 100ms", ok, wait)
	}
	if ok, _ := f.allow("b"); !ok {
		t.Fatal("another address refused")
	}
	now = now.Add(100 * time.Millisecond)
	if ok, _ := f.allow("a"); !ok {
		t.Fatal("refused after 1/rate")
	}
	if ok, _ := f.allow("a"); ok {
		t.Fatal("admitted twice after 1/rate")
	}
}
