package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"flashsale/internal/testenv"
)

// The start-up warning: WARN for a Redis that keeps nothing, nothing above
// debug for a durable one or one whose CONFIG is refused.
func TestStartWarnsWhenRedisKeepsNothing(t *testing.T) {
	t.Parallel()
	miniClient := func(t *testing.T) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	cases := []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
		want   string // the level of the line logged, "" = none
	}{
		{"no persistence", func(t *testing.T) redis.UniversalClient { return testenv.MustRedis(t).Client() }, "WARN"},
		{"append-only file", func(t *testing.T) redis.UniversalClient { return testenv.MustDurableRedis(t).Client() }, ""},
		{"CONFIG refused", miniClient, "DEBUG"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			checkRedisDurability(t.Context(), tc.client(t), log)
			out := buf.String()
			switch {
			case tc.want == "" && out != "":
				t.Fatalf("logged %q, want nothing", out)
			case tc.want != "" && !strings.Contains(out, "level="+tc.want):
				t.Fatalf("logged %q, want a %s line", out, tc.want)
			case tc.want != "WARN" && strings.Contains(out, "level=WARN"):
				t.Fatalf("warned: %q", out)
			}
		})
	}
}
