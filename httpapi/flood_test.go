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
		if ok, _ := f.allow("192.0.2.1"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := f.allow("192.0.2.1")
	if ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("past the burst: ok %v, wait %v; want refused, wait up to 100ms", ok, wait)
	}
	if ok, _ := f.allow("192.0.2.2"); !ok {
		t.Fatal("another address refused")
	}
	now = now.Add(100 * time.Millisecond)
	if ok, _ := f.allow("192.0.2.1"); !ok {
		t.Fatal("refused after 1/rate")
	}
	if ok, _ := f.allow("192.0.2.1"); ok {
		t.Fatal("admitted twice after 1/rate")
	}
}

// Every address of one IPv6 /64 draws on one bucket, and an IPv4 address
// written IPv4-mapped on its own (domain.ClientKey): more addresses of a
// /64 get no more requests.
func TestFloodShedderCountsA64AsOneClient(t *testing.T) {
	f := newFloodShedder(1) // burst 2
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	for _, tc := range []struct {
		name  string
		addrs []string
	}{
		{"two addresses of one /64", []string{"2001:db8:1:2::a", "2001:db8:1:2:ffff::b", "2001:db8:1:2::c"}},
		{"an IPv4 address and its mapped form", []string{"192.0.2.7", "::ffff:192.0.2.7", "192.0.2.7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, ip := range tc.addrs {
				ok, _ := f.allow(ip)
				if want := i < 2; ok != want {
					t.Fatalf("request %d from %s: admitted %v, want %v", i, ip, ok, want)
				}
			}
		})
	}
	if ok, _ := f.allow("2001:db8:1:3::a"); !ok {
		t.Fatal("the next /64 was refused")
	}
}
