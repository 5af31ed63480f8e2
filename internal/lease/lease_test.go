package lease_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/lease"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// Nodes contending for one lease never run their work at the same time,
// even when the work outlasts the lease's TTL several times over (the
// watchdog extends it at TTL/3), and every node gets a turn once the
// holder lets go.
func TestOneHolderAtATimeEvenPastTheTTL(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	const ttl = 300 * time.Millisecond
	var running, overlaps, runs atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 3 {
		l := lease.New([]redis.UniversalClient{srv.Client()}, persistence.LeaseKey, ttl, slog.New(slog.DiscardHandler))
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := l.Do(ctx, "job", func(ctx context.Context) error {
					if running.Add(1) > 1 {
						overlaps.Add(1)
					}
					defer running.Add(-1)
					runs.Add(1)
					select { // three TTLs: only the watchdog keeps the lease
					case <-time.After(3 * ttl):
					case <-ctx.Done():
					}
					return nil
				})
				if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("do: %v", err)
				}
				// A take that timed out (a loaded machine) only skips a
				// turn: the promise is that runs never overlap.
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if overlaps.Load() > 0 {
		t.Fatalf("%d runs overlapped another holder's", overlaps.Load())
	}
	if runs.Load() < 2 {
		t.Fatalf("only %d runs in 3 s: the lease is not handed on", runs.Load())
	}
}

// A holder whose lease cannot be extended (Redis gone) has its work
// cancelled rather than going on unprotected.
func TestLostLeaseCancelsTheWork(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	l := lease.New([]redis.UniversalClient{srv.Client()}, persistence.LeaseKey, 300*time.Millisecond, slog.New(slog.DiscardHandler))
	ran, err := l.Do(context.Background(), "job", func(ctx context.Context) error {
		srv.Kill()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(3 * time.Second):
			t.Error("work went on for 3 s after its lease could not be extended")
			return nil
		}
	})
	if !ran || err != nil {
		t.Fatalf("ran %v, %v", ran, err)
	}
}
