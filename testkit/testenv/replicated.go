package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated Redis for tests: replicas, sentinels and a Redis Cluster,
// each a private redis-server process on a random port like MustRedis's
// (Debian's redis-server binary is also the sentinel: --sentinel).

// mustRedisWith is MustRedis with a configuration file and extra flags.
func mustRedisWith(tb testing.TB, conf string, extra ...string) *RedisServer {
	tb.Helper()
	s, err := startRedisWith(tb.TempDir(), conf, extra...)
	if err != nil {
		tb.Fatal(err)
	}
	s.tb = tb
	tb.Cleanup(s.Kill)
	return s
}

// startRedisWith starts a redis-server that keeps its files in dir, with
// a configuration file (written into dir when conf is not empty) and
// extra flags, on a free port; the caller kills it.
func startRedisWith(dir, conf string, extra ...string) (*RedisServer, error) {
	s := &RedisServer{dir: dir, extra: extra}
	if conf != "" {
		// A sentinel rewrites its file: it lives in the server's own dir.
		path := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, fmt.Errorf("write redis.conf: %w", err)
		}
		s.conf = path
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if s.Port, err = freePort(); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("start redis-server %s: %w", strings.Join(extra, " "), err)
}

// MustRedisFlags is MustRedis with extra redis-server flags, which win
// over its defaults ("--appendonly", "yes" makes an append-only server).
func MustRedisFlags(tb testing.TB, extra ...string) *RedisServer {
	tb.Helper()
	return mustRedisWith(tb, "", extra...)
}

// MustReplica starts a replica of primary and waits until it has synced.
func MustReplica(tb testing.TB, primary *RedisServer) *RedisServer {
	tb.Helper()
	return MustReplicaFlags(tb, primary)
}

// MustReplicaFlags is MustReplica with extra flags for the replica.
func MustReplicaFlags(tb testing.TB, primary *RedisServer, extra ...string) *RedisServer {
	tb.Helper()
	// A primary waits 5 s by default for more replicas to sync with one
	// transfer; one replica need not wait.
	if err := primary.Client().ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		tb.Fatal(err)
	}
	r := mustRedisWith(tb, "", append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}, extra...)...)
	r.WaitSynced(tb)
	return r
}

// WaitSynced waits until the replica's link to its primary is up.
func (s *RedisServer) WaitSynced(tb testing.TB) {
	tb.Helper()
	c := s.Client()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("replica on port %d not synced: %v\n%s", s.Port, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MustSentinel starts a sentinel that monitors primary under name, with a
// quorum of one and a failure detected after a second, and waits until it
// has found the primary's replicas.
func MustSentinel(tb testing.TB, primary *RedisServer, name string, replicas int) *RedisServer {
	tb.Helper()
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n", name, primary.Port)
	s := mustRedisWith(tb, conf, "--sentinel")
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := c.Replicas(context.Background(), name).Result()
		if err == nil && len(got) >= replicas {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sentinel on port %d found %d replicas of %s, want %d: %v", s.Port, len(got), name, replicas, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SentinelURL is go-redis's failover URL for the primary the sentinels
// monitor under name (REDIS_MODE=sentinel).
func SentinelURL(name string, sentinels ...*RedisServer) string {
	q := url.Values{"master_name": {name}}
	for _, s := range sentinels[1:] {
		q.Add("addr", s.Addr())
	}
	return "redis://" + sentinels[0].Addr() + "/0?" + q.Encode()
}

// MustRedisCluster starts a Redis Cluster of n primaries without replicas
// (redis-cli --cluster create) and waits until every node says it is ok.
func MustRedisCluster(tb testing.TB, n int) []*RedisServer {
	tb.Helper()
	c, err := StartRedisCluster(tb.TempDir(), n, 0)
	if err != nil {
		tb.Fatal(err)
	}
	for _, node := range c.Nodes {
		node.tb = tb
	}
	tb.Cleanup(c.Close)
	return c.Nodes
}

// ClusterURL is go-redis's cluster URL of nodes (REDIS_MODE=cluster).
func ClusterURL(nodes ...*RedisServer) string {
	q := url.Values{}
	for _, s := range nodes[1:] {
		q.Add("addr", s.Addr())
	}
	return "redis://" + nodes[0].Addr() + "?" + q.Encode()
}
