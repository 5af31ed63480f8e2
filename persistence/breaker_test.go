package persistence_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// TestBreakerOpensOnOutagesAndRecoversByItself: Redis's own replies never
// open the breaker; three failed calls do, and then calls fail at once
// without reaching Redis; the ping probe closes it again once Redis is
// back, over a new connection (whose handshake goes through the same
// hook), and the re-sync runs before Redis is usable again.
func TestBreakerOpensOnOutagesAndRecoversByItself(t *testing.T) {
	t.Parallel()
	proxy := testenv.MustProxy(t, testenv.MustRedis(t).Addr())
	var resyncs atomic.Int32
	release := make(chan struct{})
	b := persistence.NewBreaker(slog.New(slog.DiscardHandler), persistence.BreakerOptions{
		Open: 100 * time.Millisecond,
		OnClose: func() error {
			<-release
			resyncs.Add(1)
			return nil
		},
	})
	c := redis.NewClient(persistence.RequestClientOptions(redis.Options{Addr: proxy.Addr()}, 0))
	c.AddHook(b)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	for i := 0; i < 5; i++ {
		if err := c.Get(ctx, "no-such-key").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET of a missing key: %v", err)
		}
	}
	if !b.Usable() {
		t.Fatal("redis.Nil answers opened the breaker")
	}

	proxy.Stall()
	for i := 0; i < persistence.BreakerFailuresDefault; i++ {
		began := time.Now()
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("ping through a stalled proxy succeeded")
		}
		if took := time.Since(began); took > time.Second {
			t.Fatalf("a call to a stalled redis took %v", took)
		}
	}
	if !b.Down() || b.Usable() {
		t.Fatal("breaker not open after 3 failed calls")
	}
	began := time.Now()
	if err := c.Ping(ctx).Err(); !errors.Is(err, persistence.ErrRedisUnavailable) {
		t.Fatalf("call while open: %v, want ErrRedisUnavailable", err)
	}
	if took := time.Since(began); took > 50*time.Millisecond {
		t.Fatalf("a call while open took %v", took)
	}

	// Redis back, on new connections only: the stalled ones are gone.
	proxy.Down()
	proxy.Up()
	proxy.Resume()
	// Past the open time the breaker lets one probe through; a request's
	// call is not it (only Watch's ping probes), however healthy Redis is.
	time.Sleep(150 * time.Millisecond)
	if err := c.Get(ctx, "no-such-key").Err(); !errors.Is(err, persistence.ErrRedisUnavailable) {
		t.Fatalf("a request's call while half-open: %v, want ErrRedisUnavailable", err)
	}
	if !b.Down() {
		t.Fatal("a request's call probed and closed the breaker")
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go b.Watch(watchCtx, 20*time.Millisecond, func(ctx context.Context) error { return c.Ping(ctx).Err() })
	testenv.WaitFor(t, "the breaker closed", func() bool { return !b.Down() })
	if b.Usable() {
		t.Fatal("usable before the re-sync returned")
	}
	close(release)
	testenv.WaitFor(t, "usable after the re-sync", b.Usable)
	if n := resyncs.Load(); n != 1 {
		t.Fatalf("%d re-syncs, want 1", n)
	}
}
