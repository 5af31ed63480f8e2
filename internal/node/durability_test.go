package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"flashsale/internal/config"
	"flashsale/internal/testenv"
	"flashsale/persistence"
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
	rollback := []string{"oversell", "answer one request id with two orders", "lose orders answered OK"}
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
		{"nothing kept", realMode, configured(false), persistence.DurabilityNone, "WARN", []string{"answered OK", "are lost", "second order"}},
		{"CONFIG refused by an ACL", realMode, func(t *testing.T) redis.UniversalClient {
			c := testenv.MustRedis(t).Client()
			if err := c.Do(t.Context(), "ACL", "SETUSER", "default", "-config").Err(); err != nil {
				t.Fatal(err)
			}
			return c
		}, persistence.DurabilityUnknown, "WARN", append([]string{"cannot be told"}, rollback...)},
		{"no CONFIG command", realMode, func(t *testing.T) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}) // like a managed Redis that removed it
			t.Cleanup(func() { _ = c.Close() })
			return c
		}, persistence.DurabilityUnknown, "WARN", append([]string{"cannot be told"}, rollback...)},
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
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if tc.level == "" {
				if buf.Len() > 0 {
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
			if !strings.Contains(line, "failover") {
				t.Errorf("%q does not say that a failover is not covered", line)
			}
			if tc.level == "WARN" && !strings.Contains(line, persistence.SafeDurability) {
				t.Errorf("%q does not name the setting that keeps the promises", line)
			}
		})
	}
}
