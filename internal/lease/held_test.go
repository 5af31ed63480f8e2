package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"flashsale/internal/lease"
)

// fakeClaim counts renewals and releases; fail makes renewals fail.
type fakeClaim struct {
	mu       sync.Mutex
	renewals []time.Time
	released int
	fail     error
}

func (c *fakeClaim) Renew(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.renewals = append(c.renewals, time.Now())
	return c.fail
}

func (c *fakeClaim) Release(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released++
	return nil
}

func (c *fakeClaim) counts() (renewals, released int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.renewals), c.released
}

// A Keeper renews every interval and at once when woken, releases the lease
// once when stopped (however often stop is called), and leaves it held
// when told to.
func TestKeepRenewsWakesAndReleases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		keep        bool
		wantRelease int
	}{
		{"stop releases the lease once", false, 1},
		{"stop leaves a kept lease held", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &fakeClaim{}
			wake := make(chan struct{}, 1)
			keeper := lease.Held("test", time.Hour, c).Keeper(lease.KeepOptions{Every: time.Hour, Wake: wake, Keep: tc.keep})
			if err := keeper.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			wake <- struct{}{}
			deadline := time.Now().Add(5 * time.Second)
			for n, _ := c.counts(); n < 1; n, _ = c.counts() {
				if time.Now().After(deadline) {
					t.Fatal("a wake did not renew the lease")
				}
				time.Sleep(5 * time.Millisecond)
			}
			keeper.Stop()
			keeper.Stop()
			if _, released := c.counts(); released != tc.wantRelease {
				t.Fatalf("released %d times, want %d", released, tc.wantRelease)
			}
		})
	}
}

// A failing renewal is reported and retried after Retry; with GiveUp it
// is reported once and not retried.
func TestKeepRetriesOrGivesUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		giveUp bool
		check  func(t *testing.T, renewals, reports int)
	}{
		{"retried after a failure", false, func(t *testing.T, renewals, reports int) {
			if renewals < 3 || reports < 3 {
				t.Fatalf("%d renewals, %d reports: want retries", renewals, reports)
			}
		}},
		{"given up after a failure", true, func(t *testing.T, renewals, reports int) {
			if renewals != 1 || reports != 1 {
				t.Fatalf("%d renewals, %d reports: want one of each", renewals, reports)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &fakeClaim{fail: lease.ErrLost}
			var mu sync.Mutex
			reports := 0
			keeper := lease.Held("test", time.Hour, c).Keeper(lease.KeepOptions{
				Every: 20 * time.Millisecond, Retry: 10 * time.Millisecond, GiveUp: tc.giveUp,
				OnError: func(err error) {
					if !errors.Is(err, lease.ErrLost) {
						t.Errorf("reported %v, want ErrLost", err)
					}
					mu.Lock()
					reports++
					mu.Unlock()
				},
			})
			if err := keeper.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			keeper.Stop()
			renewals, _ := c.counts()
			mu.Lock()
			defer mu.Unlock()
			tc.check(t, renewals, reports)
		})
	}
}
