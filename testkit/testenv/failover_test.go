package testenv

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Sentinel set's primary killed with SIGKILL is replaced by a replica
// the sentinels elect; a write the replicas acknowledged is on the new
// primary, the failover client finds it, and the killed node rejoins as
// a replica.
func TestSentinelSetPromotesAReplicaWhenThePrimaryIsKilled(t *testing.T) {
	t.Parallel()
	set := MustSentinelSet(t)
	if len(set.Data) != 3 || len(set.Sentinels) != 3 {
		t.Fatalf("%d data nodes and %d sentinels, want 3 and 3", len(set.Data), len(set.Sentinels))
	}
	ctx := t.Context()
	c := set.FailoverClient()
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Wait(ctx, 2, 5000).Result(); err != nil || n != 2 {
		t.Fatalf("WAIT 2: %d replicas, %v", n, err)
	}
	old, err := set.KillPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old != set.Data[0] {
		t.Fatalf("killed %s, want the first primary %s", old.Addr(), set.Data[0].Addr())
	}
	began := time.Now()
	promoted, err := set.WaitPromoted(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s promoted %.1fs after the kill", promoted.Addr(), time.Since(began).Seconds())
	if promoted == old {
		t.Fatal("the killed primary is named again")
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("through the failover client after the failover: %q, %v", got, err)
	}
	if err := set.Rejoin(ctx, old); err != nil {
		t.Fatal(err)
	}
	if role, err := infoField(ctx, old, "replication", "role"); role != "slave" {
		t.Fatalf("the rejoined node says role %q (%v), want a replica", role, err)
	}
}

// A Redis Cluster of three primaries with a replica each: the primary of
// a key killed with SIGKILL is replaced by its replica, which serves the
// key's slot with the write it acknowledged, and the killed node rejoins.
func TestRedisClusterPromotesTheReplicaOfAKilledPrimary(t *testing.T) {
	t.Parallel()
	cl := MustReplicatedCluster(t)
	ctx := t.Context()
	primaries, err := cl.Primaries(ctx)
	if err != nil || len(primaries) != 3 || len(cl.Nodes) != 6 {
		t.Fatalf("%d primaries of %d nodes (%v), want 3 of 6", len(primaries), len(cl.Nodes), err)
	}
	const key = "{v7}:stock"
	p, err := cl.PrimaryOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	direct := p.Client()
	if err := direct.Set(ctx, key, "20", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := direct.Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas, %v", n, err)
	}
	old, err := cl.KillPrimaryOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if old != p {
		t.Fatalf("killed %s, want %s", old.Addr(), p.Addr())
	}
	began := time.Now()
	promoted, err := cl.WaitPromoted(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s promoted %.1fs after the kill", promoted.Addr(), time.Since(began).Seconds())
	if now, err := cl.PrimaryOf(ctx, key); err != nil || now != promoted {
		t.Fatalf("the key's slot is served by %v (%v), want the promoted %s", now, err, promoted.Addr())
	}
	cc := cl.Client()
	defer cc.Close()
	if got, err := cc.Get(ctx, key).Result(); err != nil || got != "20" {
		t.Fatalf("through the cluster client after the failover: %q, %v", got, err)
	}
	if err := cl.Rejoin(ctx, old); err != nil {
		t.Fatal(err)
	}
	if role, err := infoField(ctx, old, "replication", "role"); role != "slave" {
		t.Fatalf("the rejoined node says role %q (%v), want a replica", role, err)
	}
}

// A server restarted from a snapshot holds what it held when the snapshot
// was taken: later writes are gone, keys written before are there at
// their older values; with or without an append-only file.
func TestRestartFromSnapshotGoesBackInTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *RedisServer
	}{
		{"RDB", MustRedis},
		{"append-only file", MustDurableRedis},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.start(t)
			ctx := t.Context()
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: 3})
			defer c.Close()
			if err := c.Set(ctx, "stock", "20", 0).Err(); err != nil {
				t.Fatal(err)
			}
			snap := t.TempDir()
			if err := s.SaveSnapshot(ctx, snap); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "stock", "15", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "later", "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.RestartFromSnapshot(snap); err != nil {
				t.Fatal(err)
			}
			if got, err := c.Get(ctx, "stock").Result(); err != nil || got != "20" {
				t.Fatalf("stock after the restart: %q, %v; want the snapshot's 20", got, err)
			}
			if n, err := c.Exists(ctx, "later").Result(); err != nil || n != 0 {
				t.Fatalf("a key written after the snapshot: exists %d, %v", n, err)
			}
		})
	}
}
