package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"flashsale/config"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// The start-up line tells the operator, for the stock Redis's persistence
// setting as the real server reports it, what a crash can do in the words
// of the promises and which setting keeps them: one WARN line for every
// setting but appendonly yes + appendfsync always (one INFO line), the
// settings that cannot be read included; one WARN for real mode on the
// in-process Redis; nothing for the embedded demo.
func TestStartSaysWhatACrashOfRedisCanDo(t *testing.T) {
	t.Parallel()
	realMode := config.Config{RedisURL: "redis://set", DatabaseURL: "postgres://set"}
	// configured starts a private redis-server and applies settings the way
	// an operator's redis.conf would (CONFIG SET takes the same directives).
	configured := func(durable bool, settings ...string) func(t *testing.T) redis.UniversalClient {
		return func(t *testing.T) redis.UniversalClient {
			s := testenv.MustRedis(t)
			if durable {
				s = testenv.MustDurableRedis(t)
			}
			c := s.Client()
			for i := 0; i < len(settings); i += 2 {
				if err := c.ConfigSet(t.Context(), settings[i], settings[i+1]).Err(); err != nil {
					t.Fatal(err)
				}
			}
			return c
		}
	}
	rollback := []string{"rebuilds each voucher and red packet from the database", "neither oversells", "is lost"}
	cases := []struct {
		name   string
		cfg    config.Config
		client func(t *testing.T) redis.UniversalClient
		want   persistence.DurabilityRisk
		level  string   // of the one line; "" = no line
		words  []string // the promises the line must name
	}{
		{"append-only file written before every answer", realMode, configured(true), persistence.DurabilityAlways, "INFO", []string{"loses nothing"}},
		{"append-only file written every second", realMode, configured(true, "appendfsync", "everysec"), persistence.DurabilityEverysec, "WARN", rollback},
		{"append-only file written when the OS likes", realMode, configured(true, "appendfsync", "no"), persistence.DurabilityNoFsync, "WARN", rollback},
		{"snapshots only", realMode, configured(false, "save", "900 1"), persistence.DurabilitySnapshots, "WARN", rollback},
		{"nothing kept", realMode, configured(false), persistence.DurabilityNone, "WARN", []string{"answered OK", "is lost", "second order"}},
		{"CONFIG refused by an ACL", realMode, func(t *testing.T) redis.UniversalClient {
			c := testenv.MustRedis(t).Client()
			if err := c.Do(t.Context(), "ACL", "SETUSER", "default", "-config").Err(); err != nil {
				t.Fatal(err)
			}
			return c
		}, persistence.DurabilityUnknown, "WARN", []string{"cannot be told", "lose orders answered OK"}},
		{"no CONFIG command", realMode, func(t *testing.T) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}) // like a managed Redis that removed it
			t.Cleanup(func() { _ = c.Close() })
			return c
		}, persistence.DurabilityUnknown, "WARN", []string{"cannot be told", "lose orders answered OK"}},
		{"real mode on the in-process Redis", config.Config{DatabaseURL: "postgres://set", AllowEmbeddedRedis: true}, func(t *testing.T) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}, persistence.DurabilityEmbedded, "WARN", []string{"oversell", "answered OK", "second order"}},
		{"embedded demo mode", config.Config{}, func(t *testing.T) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}, persistence.DurabilityRisk{}, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			checkRedisDurability(t.Context(), tc.cfg, tc.client(t), log)
			// The run id's line comes apart (TestStartWarnsWhenRedisHidesItsRunID).
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if l != "" && !strings.Contains(l, "does not tell its run id") {
					lines = append(lines, l)
				}
			}
			if tc.level == "" {
				if len(lines) > 0 {
					t.Fatalf("logged %q, want nothing", buf.String())
				}
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "level="+tc.level) {
				t.Fatalf("logged %q, want one %s line", buf.String(), tc.level)
			}
			line := lines[0]
			if !strings.Contains(line, tc.want.Crash) {
				t.Errorf("%q does not say what this setting's crash does: %q", line, tc.want.Crash)
			}
			for _, w := range tc.words {
				if !strings.Contains(line, w) {
					t.Errorf("%q does not name %q", line, w)
				}
			}
			if !strings.Contains(line, "failover") || !strings.Contains(line, "REDIS_ACK_REPLICAS") {
				t.Errorf("%q does not say what keeps the orders answered OK across a failover", line)
			}
			if tc.level == "WARN" && !strings.Contains(line, persistence.SafeDurability) {
				t.Errorf("%q does not name the setting that keeps the promises", line)
			}
		})
	}
}

// With replicas that can be promoted (REDIS_MODE sentinel or cluster) and
// no acknowledgements, a failover can lose orders answered OK whatever the
// persistence setting: a second WARN line says so and names the setting
// that keeps them. With acknowledgements, or one server, it says nothing.
func TestStartWarnsOfAFailoverWithoutAcknowledgements(t *testing.T) {
	t.Parallel()
	c := testenv.MustDurableRedis(t).Client()
	for _, tc := range []struct {
		mode string
		acks int
		warn bool
	}{
		{persistence.RedisSentinel, 0, true},
		{persistence.RedisCluster, 0, true},
		{persistence.RedisSentinel, 1, false},
		{persistence.RedisSingle, 0, false},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		cfg := config.Config{RedisURL: "redis://set", DatabaseURL: "postgres://set", RedisMode: tc.mode, RedisAckReplicas: tc.acks}
		checkRedisDurability(t.Context(), cfg, c, log)
		warned := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "REDIS_ACK_REPLICAS=1")
		if warned != tc.warn {
			t.Errorf("REDIS_MODE=%s REDIS_ACK_REPLICAS=%d: logged %q; want a failover warning: %v", tc.mode, tc.acks, buf.String(), tc.warn)
		}
	}
}

// A server that does not tell its run id to scripts (a managed Redis that
// refuses INFO; here an in-process one without the field) gets a WARN
// that a restart to an older state cannot be noticed; a real
// redis-server gets none.
func TestStartWarnsWhenRedisHidesItsRunID(t *testing.T) {
	t.Parallel()
	real := testenv.MustDurableRedis(t).Client()
	hidden := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = hidden.Close() })
	cfg := config.Config{RedisURL: "redis://set", DatabaseURL: "postgres://set"}
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		warn bool
	}{{"redis-server", real, false}, {"a server without run_id", hidden, true}} {
		var buf bytes.Buffer
		checkRedisDurability(t.Context(), cfg, tc.rdb, slog.New(slog.NewTextHandler(&buf, nil)))
		if got := strings.Contains(buf.String(), persistence.NoRunIDWarning); got != tc.warn {
			t.Errorf("%s: logged %q; want the run id warning: %v", tc.name, buf.String(), tc.warn)
		}
	}
}

// A node without an actor cluster (CLUSTER_PROVIDER=test) that finds
// another node holding an order-id slot of its database warns: the two
// would contend for every segment's lease. The node's own slot, or nodes
// in an actor cluster, give no warning.
func TestStartWarnsOfOtherNodesWithoutAnActorCluster(t *testing.T) {
	t.Parallel()
	db := testenv.MustPostgres(t)
	quiet := slog.New(slog.DiscardHandler)
	first := persistence.NewOrderIDs(db, quiet, persistence.OrderIDOptions{})
	if err := first.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	realMode := func(provider string) config.Config {
		return config.Config{RedisURL: "redis://set", DatabaseURL: "postgres://set", ClusterProvider: provider}
	}
	warned := func(cfg config.Config, ids *persistence.OrderIDs) bool {
		var buf bytes.Buffer
		warnLoneNodes(t.Context(), cfg, ids, slog.New(slog.NewTextHandler(&buf, nil)))
		return strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "CLUSTER_PROVIDER=automanaged")
	}
	if warned(realMode("test"), first) {
		t.Error("a lone node warned of other nodes")
	}
	second := persistence.NewOrderIDs(db, quiet, persistence.OrderIDOptions{})
	if err := second.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !warned(realMode("test"), second) {
		t.Error("a second node with CLUSTER_PROVIDER=test did not warn")
	}
	if warned(realMode("automanaged"), second) {
		t.Error("a node in an actor cluster warned")
	}
}
