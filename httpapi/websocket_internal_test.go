package httpapi

import (
	"testing"
	"time"
)

// A socket's operations start at the rate after a burst; one over it is
// refused with the wait until a token is there, a client that goes on
// without waiting overdraws the bucket until the socket is closed, and
// one that waits as told recovers.
func TestSubscribeRateRefusesThenCloses(t *testing.T) {
	t.Parallel()
	at := time.Unix(1000, 0)
	type step struct {
		after   time.Duration // since the step before
		wait    time.Duration // 0: admitted
		closing bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		// A refused operation overdraws: the next token is there once the
		// debt and one more are refilled.
		{"a burst of 2, then refused with the wait for a token", []step{
			{0, 0, false}, {0, 0, false}, {0, 2 * time.Second, false},
		}},
		{"waiting as told admits the next", []step{
			{0, 0, false}, {0, 0, false}, {0, 2 * time.Second, false}, {2 * time.Second, 0, false},
		}},
		{"going on without waiting closes once the debt passes the burst", []step{
			{0, 0, false}, {0, 0, false}, {0, 2 * time.Second, false}, {0, 3 * time.Second, false}, {0, 0, true},
		}},
		{"the debt is paid back at the rate", []step{
			{0, 0, false}, {0, 0, false}, {0, 2 * time.Second, false}, {0, 3 * time.Second, false},
			{3 * time.Second, 0, false}, {0, 2 * time.Second, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSubscribeRate(1, 2)
			now := at
			for i, s := range tc.steps {
				now = now.Add(s.after)
				wait, closing := r.take(now)
				if wait != s.wait || closing != s.closing {
					t.Fatalf("operation %d: wait %v, closing %v; want %v, %v", i, wait, closing, s.wait, s.closing)
				}
			}
		})
	}
	if wait, closing := (&subscribeRate{}).take(at); wait != 0 || closing {
		t.Fatal("the zero rate refused")
	}
}
