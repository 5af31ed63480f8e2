package breaker_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/breaker"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
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
	b := breaker.New(slog.New(slog.DiscardHandler), breaker.Options{
		Open: 100 * time.Millisecond,
		OnClose: func(context.Context) error {
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
	for i := 0; i < breaker.FailuresDefault; i++ {
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
	if err := c.Ping(ctx).Err(); !errors.Is(err, breaker.ErrRedisUnavailable) {
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
	// call is not it (only the Prober's ping probes), however healthy Redis is.
	time.Sleep(150 * time.Millisecond)
	if err := c.Get(ctx, "no-such-key").Err(); !errors.Is(err, breaker.ErrRedisUnavailable) {
		t.Fatalf("a request's call while half-open: %v, want ErrRedisUnavailable", err)
	}
	if !b.Down() {
		t.Fatal("a request's call probed and closed the breaker")
	}
	startProber(t, b, c)
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

// TestBreakerCloseEndsAFailingResync: a re-sync after an outage that keeps
// failing (the database is down, say) retries for as long as the breaker
// stays closed; Close at shutdown must end it, cancel the attempt under way
// and wait for it, so that it never runs against stores already closed.
func TestBreakerCloseEndsAFailingResync(t *testing.T) {
	t.Parallel()
	proxy := testenv.MustProxy(t, testenv.MustRedis(t).Addr())
	var attempts atomic.Int32
	var running atomic.Int32
	b := breaker.New(slog.New(slog.DiscardHandler), breaker.Options{
		Open: 100 * time.Millisecond,
		OnClose: func(ctx context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			attempts.Add(1)
			select { // a slow attempt: Close must cut it short
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
				return errors.New("database down")
			}
		},
	})
	c := redis.NewClient(persistence.RequestClientOptions(redis.Options{Addr: proxy.Addr()}, 0))
	c.AddHook(b)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	proxy.Stall()
	for i := 0; i < breaker.FailuresDefault; i++ {
		_ = c.Ping(ctx).Err()
	}
	if !b.Down() {
		t.Fatal("breaker not open after a stall")
	}
	proxy.Down()
	proxy.Up()
	proxy.Resume()
	startProber(t, b, c)
	testenv.WaitFor(t, "two failed re-sync attempts", func() bool { return attempts.Load() >= 2 })

	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not return while a re-sync kept failing")
	}
	if n := running.Load(); n != 0 {
		t.Fatalf("%d re-sync attempts still running after Close", n)
	}
	after := attempts.Load()
	time.Sleep(400 * time.Millisecond) // more than one retry pause
	if n := attempts.Load(); n != after {
		t.Fatalf("re-sync went on after Close: %d attempts, then %d", after, n)
	}
	if b.Usable() {
		t.Fatal("usable although the re-sync never succeeded")
	}
}

// startProber probes Redis through c every 20 ms until the test ends.
func startProber(tb testing.TB, b *breaker.Breaker, c *redis.Client) {
	tb.Helper()
	p := b.Prober(20*time.Millisecond, func(ctx context.Context) error { return c.Ping(ctx).Err() })
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
}

// On a Redis Cluster each node has its own circuit (NodeHook): a node that
// fails opens only its own, and calls to the others go on; the node-wide
// answers speak for all (Down), but grabs may use the others (Usable). The probe closes the failed node's
// circuit once it answers again, and drops it while it serves no slots
// (Masters): a failed-over primary must not keep the breaker down. Dropped
// hears of that drop once. A node dropped and then a primary again gets a
// new circuit.
func TestOneNodesCircuitOpensAloneOnACluster(t *testing.T) {
	t.Parallel()
	proxyA := testenv.MustProxy(t, testenv.MustRedis(t).Addr())
	proxyB := testenv.MustProxy(t, testenv.MustRedis(t).Addr())
	b := breaker.New(slog.New(slog.DiscardHandler), breaker.Options{Open: 50 * time.Millisecond})
	node := func(addr string) *redis.Client {
		c := redis.NewClient(persistence.RequestClientOptions(redis.Options{Addr: addr}, 0))
		c.AddHook(b.NodeHook(c))
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, bb := node(proxyA.Addr()), node(proxyB.Addr())
	var masters atomic.Value
	masters.Store([]string{proxyA.Addr(), proxyB.Addr()})
	b.Masters = func(context.Context) ([]string, error) { return masters.Load().([]string), nil }
	var dropped atomic.Int64
	b.Dropped = func(context.Context) { dropped.Add(1) }
	ctx := context.Background()

	proxyA.Down()
	for range breaker.FailuresDefault {
		_ = a.Ping(ctx).Err()
	}
	if err := a.Ping(ctx).Err(); !errors.Is(err, breaker.ErrRedisUnavailable) {
		t.Fatalf("a call to the failed node: %v, want ErrRedisUnavailable", err)
	}
	for range 2 * breaker.FailuresDefault {
		if err := bb.Ping(ctx).Err(); err != nil {
			t.Fatalf("a call to the healthy node while the other's circuit is open: %v", err)
		}
	}
	if !b.Down() || !b.Usable() {
		t.Fatalf("one node's circuit open: Down %v, Usable %v; want down and still usable (the other nodes serve)", b.Down(), b.Usable())
	}
	p := b.Prober(20*time.Millisecond, func(context.Context) error { return nil })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	proxyA.Up()
	testenv.WaitFor(t, "the probe to close the node's circuit", func() bool { return !b.Down() && b.Usable() })
	if err := a.Ping(ctx).Err(); err != nil {
		t.Fatalf("a call to the node once it is back: %v", err)
	}

	// The node dies for good and a replica takes its slots.
	proxyA.Down()
	for range breaker.FailuresDefault {
		_ = a.Ping(ctx).Err()
	}
	if !b.Down() {
		t.Fatal("the node's circuit did not open again")
	}
	if n := dropped.Load(); n != 0 {
		t.Fatalf("Dropped ran %d times while the failed node still served slots, want 0", n)
	}
	masters.Store([]string{proxyB.Addr()})
	testenv.WaitFor(t, "the probe to drop the circuit of a node that serves no slots", func() bool { return !b.Down() })
	if n := dropped.Load(); n != 1 {
		t.Fatalf("Dropped ran %d times for one failover, want 1 (the clients' slot maps and the writers follow it)", n)
	}

	// The node comes back and serves slots again (promoted in its turn
	// when the primary that replaced it fails): its calls go through a
	// new circuit, not the dropped one, open with nobody to probe it.
	proxyA.Up()
	masters.Store([]string{proxyA.Addr(), proxyB.Addr()})
	if err := a.Ping(ctx).Err(); err != nil {
		t.Fatalf("a call to a node that serves slots again after its circuit was dropped: %v", err)
	}
	if b.Down() {
		t.Fatal("the breaker is down with every node answering")
	}
}
