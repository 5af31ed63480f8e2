package config

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func load(env map[string]string, args ...string) (Config, error) {
	return Load(args, func(k string) string { return env[k] }, io.Discard)
}

func TestDefaultsAreTheEmbeddedMode(t *testing.T) {
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Embedded() || !c.Demo || c.HTTPAddr != ":8080" || c.PayTimeout != 30*time.Minute || c.ClusterProvider != "test" ||
		c.ClusterName != "flashsale" || c.RateUserPerSec != 10 || c.LogFormat != "text" || c.LogLevel != "info" {
		t.Fatalf("defaults %+v", c)
	}
}

func TestRealModeDefaults(t *testing.T) {
	c, err := load(map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": "postgres://u@h:5432/db", "JWT_SECRET": "s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Embedded() || c.Demo || c.LogFormat != "json" || len(c.LockRedisURLs) != 1 || c.LockRedisURLs[0] != c.RedisURL {
		t.Fatalf("real mode %+v", c)
	}
}

func TestFlagsOverrideEnvironment(t *testing.T) {
	c, err := load(map[string]string{"HTTP_ADDR": ":1", "PAY_TIMEOUT": "1m"}, "--http-addr", ":2", "--pay-timeout=90s")
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":2" || c.PayTimeout != 90*time.Second {
		t.Fatalf("got %s %s", c.HTTPAddr, c.PayTimeout)
	}
}

func TestInvalidValuesNameTheirVariable(t *testing.T) {
	real := map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": "postgres://u@h:5432/db", "JWT_SECRET": "s"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range real {
			m[a] = b
		}
		m[k] = v
		if v == "" {
			delete(m, k)
		}
		return m
	}
	cases := []struct {
		name, variable string
		env            map[string]string
	}{
		{"bad redis url", "REDIS_URL", with("REDIS_URL", "http://nope")},
		{"bad database url", "DATABASE_URL", with("DATABASE_URL", "mysql://x")},
		{"missing jwt secret in real mode", "JWT_SECRET", with("JWT_SECRET", "")},
		{"even number of lock nodes", "LOCK_REDIS_URLS", with("LOCK_REDIS_URLS", "redis://a:1,redis://b:2")},
		{"bad lock url", "LOCK_REDIS_URLS", with("LOCK_REDIS_URLS", "ftp://a")},
		{"bad pay timeout", "PAY_TIMEOUT", with("PAY_TIMEOUT", "soon")},
		{"negative pay timeout", "PAY_TIMEOUT", with("PAY_TIMEOUT", "-1m")},
		{"bad provider", "CLUSTER_PROVIDER", with("CLUSTER_PROVIDER", "zookeeper")},
		{"automanaged without seeds", "CLUSTER_SEEDS", with("CLUSTER_PROVIDER", "automanaged")},
		{"etcd without endpoints", "ETCD_ENDPOINTS", with("CLUSTER_PROVIDER", "etcd")},
		{"bad cluster port", "CLUSTER_PORT", with("CLUSTER_PORT", "70000")},
		{"negative rate", "RATE_USER_PER_SEC", with("RATE_USER_PER_SEC", "-1")},
		{"bad log level", "LOG_LEVEL", with("LOG_LEVEL", "loud")},
		{"bad log format", "LOG_FORMAT", with("LOG_FORMAT", "xml")},
		{"bad http addr", "HTTP_ADDR", with("HTTP_ADDR", "8080")},
		{"zero batch size", "GRAB_BATCH_SIZE", with("GRAB_BATCH_SIZE", "0")},
		{"bad claim idle", "ORDER_LOG_CLAIM_IDLE", with("ORDER_LOG_CLAIM_IDLE", "never")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.env)
			var ce *Error
			if !errors.As(err, &ce) || ce.Var != tc.variable {
				t.Fatalf("got %v, want an error naming %s", err, tc.variable)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestLoggedConfigMasksSecrets(t *testing.T) {
	c, err := load(map[string]string{"REDIS_URL": "redis://:hunter2@127.0.0.1:6379/0", "DATABASE_URL": "postgres://u:pgpass@h:5432/db", "JWT_SECRET": "topsecret"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("start", "config", c)
	for _, secret := range []string{"hunter2", "pgpass", "topsecret"} {
		if strings.Contains(b.String(), secret) {
			t.Fatalf("log shows %q: %s", secret, b.String())
		}
	}
}
