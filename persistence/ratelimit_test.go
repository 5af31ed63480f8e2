package persistence_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

func TestRateLimitsAdmitABatchInOneRoundTrip(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1}) // one connection: no handshakes mid-test
	t.Cleanup(func() { _ = rdb.Close() })
	var trips testenv.Counter
	rdb.AddHook(&trips)
	lim := persistence.NewRateLimits(rdb, 5, 3)
	// Cold: Redis does not have redis_rate's scripts yet; a second pipeline
	// sends their source (go-redis may also re-handshake the connection).
	if _, err := lim.Admit(t.Context(), 41, []domain.RateCheck{{IP: "10.9.9.9"}}); err != nil {
		t.Fatal(err)
	}
	trips.RoundTrips.Store(0)

	// 3 grabs from one IP and 4 from another (IP burst 3), 7 in all
	// against a voucher burst of 5: the IP limit refuses the 7th, and the
	// voucher's 5 slots go to the first 5 the IP limit let through.
	checks := []domain.RateCheck{
		{IP: "10.0.0.1"}, {IP: "10.0.0.1"}, {IP: "10.0.0.1"},
		{IP: "10.0.0.9"}, {IP: "10.0.0.9"}, {IP: "10.0.0.9"}, {IP: "10.0.0.9"},
	}
	waits, err := lim.Admit(t.Context(), 42, checks)
	if err != nil {
		t.Fatal(err)
	}
	admitted := []bool{true, true, true, true, true, false, false}
	for i, w := range waits {
		if (w == 0) != admitted[i] {
			t.Fatalf("grab %d: wait %s, admitted want %v (all: %v)", i, w, admitted[i], waits)
		}
	}
	if n := trips.RoundTrips.Load(); n != 1 {
		t.Fatalf("%d round trips, want 1", n)
	}

	t.Run("voucher limit admits the first grabs of a batch", func(t *testing.T) {
		lim := persistence.NewRateLimits(rdb, 3, 0)
		waits, err := lim.Admit(t.Context(), 43, make([]domain.RateCheck, 5))
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range waits {
			if (w == 0) != (i < 3) {
				t.Fatalf("waits %v", waits)
			}
		}
	})
	t.Run("survives redis losing its scripts", func(t *testing.T) {
		if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		waits, err := persistence.NewRateLimits(rdb, 0, 1).Admit(t.Context(), 44, []domain.RateCheck{{IP: "10.7.7.7"}, {IP: "10.7.7.7"}})
		if err != nil || waits[0] != 0 || waits[1] == 0 {
			t.Fatalf("after SCRIPT FLUSH: %v %v", waits, err)
		}
	})
	t.Run("all limits off admits without a round trip", func(t *testing.T) {
		before := trips.RoundTrips.Load()
		waits, err := persistence.NewRateLimits(rdb, 0, 0).Admit(t.Context(), 45, make([]domain.RateCheck, 3))
		if err != nil || waits[0] != 0 || trips.RoundTrips.Load() != before {
			t.Fatalf("%v %v", waits, err)
		}
	})
}

// The per-IP limit counts an IPv6 /64 as one client, for single requests
// (AllowIP) and grab batches (Admit) alike, which draw on one budget.
func TestRateLimitsCountA64AsOneClient(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	rdb := srv.Client()
	lim := persistence.NewRateLimits(rdb, 0, 2) // burst 2
	for i, ip := range []string{"2001:db8:1:2::a", "2001:db8:1:2:ffff::b"} {
		if wait, err := lim.AllowIP(t.Context(), ip); err != nil || wait != 0 {
			t.Fatalf("request %d from %s: wait %v, err %v; want admitted", i, ip, wait, err)
		}
	}
	if wait, err := lim.AllowIP(t.Context(), "2001:db8:1:2::c"); err != nil || wait == 0 {
		t.Fatalf("a third address of the /64: wait %v, err %v; want refused", wait, err)
	}
	waits, err := lim.Admit(t.Context(), 46, []domain.RateCheck{{IP: "2001:db8:1:2::d"}, {IP: "2001:db8:1:3::a"}})
	if err != nil {
		t.Fatal(err)
	}
	if waits[0] == 0 || waits[1] != 0 {
		t.Fatalf("grabs from the spent /64 and the next one: waits %v; want refused, admitted", waits)
	}
}
