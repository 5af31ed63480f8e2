package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/lease"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// A segment's lease whose renewal failed because Redis went away (here:
// killed and restarted from its append-only file, which kept the lease) is
// taken back at once by the segment's next activation in the same
// process, instead of after SEGMENT_LEASE_TTL; another process still
// waits for it, and a lease another holder took is not taken back.
func TestASegmentLeaseLostToAnOutageIsTakenBackAtOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.MustDurableRedis(t)
	rdb := srv.Client()
	ctx := context.Background()
	const ttl = 20 * time.Second
	leases := newSegmentLeases(lease.New([]redis.UniversalClient{rdb}, persistence.LeaseKey, ttl, testenv.QuietLogger()), ttl)
	l, err := leases.Acquire(ctx, "seg:test/0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := l.Extend(ctx); err == nil {
		t.Fatal("a renewal while redis is away succeeded")
	}
	l.Release(ctx) // the activation stops; a lease it may still hold is kept
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	other := lease.New([]redis.UniversalClient{rdb}, persistence.LeaseKey, ttl, testenv.QuietLogger())
	octx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := other.Acquire(octx, "seg:test/0", ttl); err == nil {
		t.Fatal("another process took the lease that this one still holds")
	}
	actx, cancel2 := context.WithTimeout(ctx, 2*time.Second) // far below the TTL
	defer cancel2()
	back, err := leases.Acquire(actx, "seg:test/0")
	if err != nil {
		t.Fatalf("the next activation in this process did not take the lease back: %v", err)
	}
	if err := back.Extend(ctx); err != nil {
		t.Fatalf("the lease taken back does not renew: %v", err)
	}
	// Refused by another holder: nothing to take back.
	if err := rdb.Set(ctx, "flashsale:lease:seg:test/0", "someone-else", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	if err := back.Extend(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("a renewal against another holder: %v, want ErrLost", err)
	}
	bctx, cancel3 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel3()
	if _, err := leases.Acquire(bctx, "seg:test/0"); err == nil {
		t.Fatal("this process took back a lease another holder has")
	}
}
