package persistence

import (
	"context"
	"net"
	"testing"

	"github.com/alicebob/miniredis/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

// TestRedisErrorsAreCountedByClass: the hook counts failures by their
// command's class, and not the answers that only look like errors.
func TestRedisErrorsAreCountedByClass(t *testing.T) {
	mini := miniredis.RunT(t)
	live := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	live.AddHook(RedisErrors{})
	t.Cleanup(func() { _ = live.Close() })
	// A port nothing listens on: every command fails to connect.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	_ = ln.Close()
	dead := redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1})
	dead.AddHook(RedisErrors{})
	t.Cleanup(func() { _ = dead.Close() })
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	for _, tc := range []struct {
		name  string
		run   func()
		class string
		want  float64
	}{
		{"an unreachable Redis is a ping error", func() { dead.Ping(ctx) }, "ping", 1},
		{"a script's error reply is a script error", func() { live.Eval(ctx, "return redis.error_reply('boom')", nil) }, "script", 1},
		{"a failed stream read is a stream error", func() { live.XLen(ctx, "k"); live.Set(ctx, "s", "x", 0); live.XLen(ctx, "s") }, "stream", 1},
		{"a pipeline counts each failed command", func() {
			p := dead.Pipeline()
			p.Get(ctx, "a")
			p.Get(ctx, "b")
			_, _ = p.Exec(ctx)
		}, "other", 2},
		{"a missing key is an answer", func() { live.Get(ctx, "missing") }, "other", 0},
		{"a cancelled caller is no Redis failure", func() { live.Get(cancelled, "k") }, "other", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := redisErrorCount(t, tc.class)
			tc.run()
			if got := redisErrorCount(t, tc.class) - before; got != tc.want {
				t.Fatalf("redis_errors_total{op=%q} rose by %v, want %v", tc.class, got, tc.want)
			}
		})
	}
}

func redisErrorCount(t *testing.T, class string) float64 {
	t.Helper()
	var m dto.Metric
	if err := redisErrors.WithLabelValues(class).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
