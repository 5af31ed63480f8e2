package config

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// load is Load from env and args without the packages' part of the
// settings (config/owners, whose tests load with it): settings
// whose packages own their defaults are unset and checked only when set.
func load(env map[string]string, args ...string) (Config, error) {
	return Load(args, func(k string) string { return env[k] }, io.Discard, nil)
}

// realSecret is a JWT_SECRET real mode accepts (at least 32 bytes).
const realSecret = "config-test-secret-0123456789abcdef"

// The embedded mode prints an admin token, so by default it listens on
// loopback only; real mode keeps the contract's :8080; a given HTTP_ADDR
// wins in both.
func TestListenAddressDefaultsToLoopbackWhenEmbedded(t *testing.T) {
	real := map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": "postgres://u@h:5432/d", "JWT_SECRET": realSecret}
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"embedded", nil, "127.0.0.1:8080"},
		{"embedded, given", map[string]string{"HTTP_ADDR": ":9090"}, ":9090"},
		{"real", real, ":8080"},
		{"real, given", map[string]string{"REDIS_URL": real["REDIS_URL"], "DATABASE_URL": real["DATABASE_URL"], "JWT_SECRET": realSecret, "HTTP_ADDR": "127.0.0.1:9"}, "127.0.0.1:9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			if err != nil || c.HTTPAddr != tc.want {
				t.Fatalf("HTTP_ADDR %q (%v), want %q", c.HTTPAddr, err, tc.want)
			}
		})
	}
}

func TestDefaultsAreTheEmbeddedMode(t *testing.T) {
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Embedded() || !c.Demo || c.HTTPAddr != "127.0.0.1:8080" || c.ClusterProvider != "test" || c.Introspection != "public" ||
		c.ClusterName != "flashsale" || c.RateUserPerSec != 10 || c.LogFormat != "text" || c.LogLevel != "info" {
		t.Fatalf("defaults %+v", c)
	}
	// Today's shutdown waits.
	if c.OrderLogDrainTimeout != 5*time.Second || c.HTTPShutdownTimeout != 10*time.Second || c.AllowEmbeddedRedis {
		t.Fatalf("defaults %+v", c)
	}
}

// Settings hold values: one whose default its package owns holds zero
// while unset, for that package to take as its default; set, it holds
// the value given, and 0 where 0 means off holds Off, which is logged as 0.
func TestSettingsWhosePackagesOwnTheirDefaultsHoldZeroWhileUnset(t *testing.T) {
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.GrabTimeout != 0 || c.GrabBatchSize != 0 || c.PayTimeout != 0 || c.RedisMode != "" || c.ShedIPPerSec != 0 || c.OrderLogLinger != 0 || c.PowDifficulty != 0 {
		t.Fatalf("unset: %+v", c)
	}
	c, err = load(map[string]string{"GRAB_TIMEOUT": "2s", "SHED_IP_PER_SEC": "0", "ORDER_LOG_LINGER": "0s", "ANON_WAIT": "0", "COST_BUDGET": "0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.GrabTimeout != 2*time.Second || c.ShedIPPerSec != Off || c.OrderLogLinger != Off || c.AnonWait != Off || c.CostBudget != Off {
		t.Fatalf("set: %+v", c)
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("start", "config", c)
	for _, want := range []string{"config.shed_ip_per_sec=0 ", "config.order_log_linger=0s ", "config.anon_wait=0s ", "config.cost_budget=0 "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the log lacks %q: %s", want, b.String())
		}
	}
}

// Effective is what the node runs with: each setting left unset at its
// package's default as owners gives it, every other as it is.
func TestEffectiveTakesThePackagesDefaultsOfTheSettingsLeftUnset(t *testing.T) {
	owners := Owners{"GRAB_TIMEOUT": {Default: "5s"}, "GRAB_BATCH_SIZE": {Default: "256"}, "SHED_IP_PER_SEC": {Default: "1000"}, "REDIS_MODE": {Default: "single"}}
	c, err := Load(nil, func(k string) string { return map[string]string{"GRAB_BATCH_SIZE": "7", "SHED_IP_PER_SEC": "0"}[k] }, io.Discard, owners)
	if err != nil {
		t.Fatal(err)
	}
	e := c.Effective(owners)
	if e.GrabTimeout != 5*time.Second || e.GrabBatchSize != 7 || e.ShedIPPerSec != Off || e.RedisMode != "single" || e.PayTimeout != 0 {
		t.Fatalf("effective %+v", e)
	}
	if c.GrabTimeout != 0 || c.RedisMode != "" {
		t.Fatalf("Effective changed the configuration it was given: %+v", c)
	}
}

// The checks see the packages' defaults of the settings left unset (a
// write timeout within an unset GRAB_TIMEOUT is refused naming its
// default), and without them check an unset setting not at all.
func TestChecksSeeThePackagesDefaults(t *testing.T) {
	env := map[string]string{"HTTP_WRITE_TIMEOUT": "5s"}
	getenv := func(k string) string { return env[k] }
	_, err := Load(nil, getenv, io.Discard, Owners{"GRAB_TIMEOUT": {Default: "5s"}})
	var ce *Error
	if !errors.As(err, &ce) || ce.Var != "HTTP_WRITE_TIMEOUT" || !strings.Contains(err.Error(), "GRAB_TIMEOUT (5s)") {
		t.Fatalf("got %v, want HTTP_WRITE_TIMEOUT refused naming GRAB_TIMEOUT (5s)", err)
	}
	if _, err := Load(nil, getenv, io.Discard, nil); err != nil {
		t.Fatalf("without the packages' defaults: %v", err)
	}
	if _, err := Load(nil, func(string) string { return "" }, io.Discard, Owners{"GRAB_TIMEOUT": {Default: "0s"}}); err == nil {
		t.Fatal("a package's default the setting refuses was taken")
	}
}

// What a package says of its setting comes first: its reading of the text
// (the package's spelling, or what is wrong), then its check.
func TestOwnersReadAndCheckFirst(t *testing.T) {
	owners := Owners{
		"INTROSPECTION": {Parse: func(s string) (string, error) {
			if s == "yes" {
				return "public", nil
			}
			return "", errors.New("want yes")
		}},
		"CLUSTER_NAME": {Check: func(c Config) string {
			if c.ClusterName == "forbidden" {
				return "not that one"
			}
			return ""
		}},
	}
	for _, tc := range []struct {
		env      map[string]string
		variable string
		says     string
	}{
		{map[string]string{"INTROSPECTION": "no"}, "INTROSPECTION", "want yes"},
		{map[string]string{"CLUSTER_NAME": "forbidden"}, "CLUSTER_NAME", "not that one"},
	} {
		_, err := Load(nil, func(k string) string { return tc.env[k] }, io.Discard, owners)
		var ce *Error
		if !errors.As(err, &ce) || ce.Var != tc.variable || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: got %v, want %s refused: %s", tc.env, err, tc.variable, tc.says)
		}
	}
	c, err := Load(nil, func(k string) string { return map[string]string{"INTROSPECTION": "yes"}[k] }, io.Discard, owners)
	if err != nil || c.Introspection != "public" {
		t.Fatalf("INTROSPECTION=yes: %q (%v), want public", c.Introspection, err)
	}
}

// Owners' problems name a setting whose package owns its default without
// one (it would show none), a default config would never apply, one that
// does not parse, and a variable that is no setting.
func TestOwnersProblems(t *testing.T) {
	o := Owners{"LOG_LEVEL": {Default: "debug"}, "GRAB_BATCH_SIZE": {Default: "many"}, "NO_SUCH_SETTING": {}}
	got := strings.Join(o.Problems(), "\n")
	for _, want := range []string{"GRAB_TIMEOUT: its package owns its default", "LOG_LEVEL: config owns its default", "GRAB_BATCH_SIZE: its package's default \"many\"", "NO_SUCH_SETTING: not a setting"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}

func TestRealModeDefaults(t *testing.T) {
	c, err := load(map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": "postgres://u@h:5432/db", "JWT_SECRET": realSecret})
	if err != nil {
		t.Fatal(err)
	}
	if c.Embedded() || c.Demo || c.LogFormat != "json" || len(c.LockRedisURLs) != 1 || c.LockRedisURLs[0] != c.RedisURL {
		t.Fatalf("real mode %+v", c)
	}
}

// Real mode (DATABASE_URL set) on the in-process Redis is refused, naming
// REDIS_URL, the setting to set, and the one that allows it anyway; with
// that, it starts (and warns at start: see node's durability test).
func TestRealModeRefusesTheInProcessRedisUnlessAllowed(t *testing.T) {
	db := "postgres://u@h:5432/db"
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		refused bool
	}{
		{"database without redis", map[string]string{"DATABASE_URL": db, "JWT_SECRET": realSecret}, nil, true},
		{"database without redis, allowed as false", map[string]string{"DATABASE_URL": db, "JWT_SECRET": realSecret, "ALLOW_EMBEDDED_REDIS": "false"}, nil, true},
		{"database without redis, allowed by variable", map[string]string{"DATABASE_URL": db, "JWT_SECRET": realSecret, "ALLOW_EMBEDDED_REDIS": "true"}, nil, false},
		{"database without redis, allowed by flag", map[string]string{"DATABASE_URL": db, "JWT_SECRET": realSecret}, []string{"--allow-embedded-redis=true"}, false},
		{"database and redis", map[string]string{"DATABASE_URL": db, "JWT_SECRET": realSecret, "REDIS_URL": "redis://127.0.0.1:6379/0"}, nil, false},
		{"embedded mode", nil, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env, tc.args...)
			if !tc.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Var != "REDIS_URL" {
				t.Fatalf("%+v, %v; want an error naming REDIS_URL", c, err)
			}
			for _, want := range []string{"ALLOW_EMBEDDED_REDIS=true", "appendonly yes", "appendfsync always"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
}

func TestFlagsOverrideEnvironment(t *testing.T) {
	env := map[string]string{"HTTP_ADDR": ":1", "PAY_TIMEOUT": "1m", "LOG_LEVEL": "debug", "CLUSTER_NAME": "from-env"}
	c, err := load(env, "--http-addr", ":2", "--pay-timeout=90s", "--log-level=info")
	if err != nil {
		t.Fatal(err)
	}
	// A flag set to its default still wins; a variable without a flag applies.
	if c.HTTPAddr != ":2" || c.PayTimeout != 90*time.Second || c.LogLevel != "info" || c.ClusterName != "from-env" {
		t.Fatalf("got %s %s %s %s", c.HTTPAddr, c.PayTimeout, c.LogLevel, c.ClusterName)
	}
}

func TestInvalidValuesNameTheirVariable(t *testing.T) {
	real := map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": "postgres://u@h:5432/db", "JWT_SECRET": realSecret}
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
		{"bad database url", "DATABASE_URL", with("DATABASE_URL", "mysql://x")},
		{"missing jwt secret in real mode", "JWT_SECRET", with("JWT_SECRET", "")},
		{"even number of lock nodes", "LOCK_REDIS_URLS", with("LOCK_REDIS_URLS", "redis://a:1,redis://b:2")},
		{"bad pay timeout", "PAY_TIMEOUT", with("PAY_TIMEOUT", "soon")},
		{"negative pay timeout", "PAY_TIMEOUT", with("PAY_TIMEOUT", "-1m")},
		{"bad jwt max ttl", "JWT_MAX_TTL", with("JWT_MAX_TTL", "forever")},
		{"zero jwt max ttl", "JWT_MAX_TTL", with("JWT_MAX_TTL", "0s")},
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
		{"negative linger", "ORDER_LOG_LINGER", with("ORDER_LOG_LINGER", "-1ms")},
		{"linger past a second", "ORDER_LOG_LINGER", with("ORDER_LOG_LINGER", "2s")},
		{"node id with a space", "NODE_ID", with("NODE_ID", "node a")},
		{"node id too long", "NODE_ID", with("NODE_ID", strings.Repeat("n", 129))},
		{"zero grab timeout", "GRAB_TIMEOUT", with("GRAB_TIMEOUT", "0s")},
		{"bad order log drain timeout", "ORDER_LOG_DRAIN_TIMEOUT", with("ORDER_LOG_DRAIN_TIMEOUT", "soon")},
		{"negative http shutdown timeout", "HTTP_SHUTDOWN_TIMEOUT", with("HTTP_SHUTDOWN_TIMEOUT", "-1s")},
		{"negative drain delay", "HTTP_DRAIN_DELAY", with("HTTP_DRAIN_DELAY", "-1s")},
		{"zero body timeout", "HTTP_BODY_TIMEOUT", with("HTTP_BODY_TIMEOUT", "0s")},
		{"write timeout within the grab timeout", "HTTP_WRITE_TIMEOUT", func() map[string]string {
			m := with("HTTP_WRITE_TIMEOUT", "5s")
			m["GRAB_TIMEOUT"] = "5s"
			return m
		}()},
		{"zero response cap", "MAX_RESPONSE_BYTES", with("MAX_RESPONSE_BYTES", "0")},
		{"zero websocket operations", "WS_MAX_OPERATIONS", with("WS_MAX_OPERATIONS", "0")},
		{"negative connection rate", "CONN_PER_IP_PER_SEC", with("CONN_PER_IP_PER_SEC", "-1")},
		{"zero connection burst", "CONN_PER_IP_BURST", with("CONN_PER_IP_BURST", "0")},
		{"negative connection wait", "CONN_PER_IP_WAIT", with("CONN_PER_IP_WAIT", "-1s")},
		{"negative connections waiting", "CONN_MAX_WAITING", with("CONN_MAX_WAITING", "-1")},
		{"bad allow embedded redis", "ALLOW_EMBEDDED_REDIS", with("ALLOW_EMBEDDED_REDIS", "maybe")},
		{"zero status sync interval", "STATUS_SYNC_INTERVAL", with("STATUS_SYNC_INTERVAL", "0s")},
		{"status sync interval past a minute", "STATUS_SYNC_INTERVAL", with("STATUS_SYNC_INTERVAL", "2m")},
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
	c, err := load(map[string]string{
		"REDIS_URL":       "redis://:hunter2@127.0.0.1:6379/0",
		"LOCK_REDIS_URLS": "redis://:lockpass@127.0.0.1:6379/0",
		"DATABASE_URL":    "postgres://u:pgpass@h:5432/db?sslmode=verify-full&password=qsecret&sslpassword=sslsecret&pass%77ord=escsecret",
		"JWT_SECRET":      "topsecret-0123456789abcdef0123456789",
	})
	if err != nil {
		t.Fatal(err)
	}
	// go-redis rejects a password query parameter, but the log must not
	// depend on that.
	c.RedisURL += "?password=redisqpass"
	c.LockRedisURLs = append(c.LockRedisURLs, "redis://127.0.0.1:6380/0?Password=lockqpass")
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("start", "config", c)
	for _, secret := range []string{"hunter2", "lockpass", "pgpass", "qsecret", "sslsecret", "escsecret", "redisqpass", "lockqpass", "topsecret"} {
		if strings.Contains(b.String(), secret) {
			t.Fatalf("log shows %q: %s", secret, b.String())
		}
	}
	if !strings.Contains(b.String(), "sslmode=verify-full") {
		t.Fatalf("log lost the other parameters: %s", b.String())
	}
}

func TestUsageNeverShowsSecrets(t *testing.T) {
	secrets := []string{"topsecret-value", "pgpass", "redispass", "lockpass"}
	env := map[string]string{
		"JWT_SECRET":      secrets[0],
		"DATABASE_URL":    "postgres://u:" + secrets[1] + "@h:5432/db",
		"REDIS_URL":       "redis://:" + secrets[2] + "@127.0.0.1:6379/0",
		"LOCK_REDIS_URLS": "redis://:" + secrets[3] + "@127.0.0.1:6379/0",
	}
	for _, args := range [][]string{{"--bogus-flag"}, {"--help"}, {"-h"}} {
		t.Run(args[0], func(t *testing.T) {
			var out strings.Builder
			_, err := Load(args, func(k string) string { return env[k] }, &out, nil)
			if err == nil {
				t.Fatal("no error")
			}
			printed := out.String() + err.Error()
			for _, secret := range secrets {
				if strings.Contains(printed, secret) {
					t.Fatalf("shows %q:\n%s", secret, printed)
				}
			}
			if args[0] == "--bogus-flag" {
				// One line naming the flag, for main to print; no usage.
				if errors.Is(err, flag.ErrHelp) || out.Len() > 0 || !strings.Contains(err.Error(), "bogus-flag") || strings.Contains(err.Error(), "\n") {
					t.Fatalf("got %q and output %q, want one line naming the flag", err, out.String())
				}
				return
			}
			if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "-jwt-secret") {
				t.Fatalf("got %v and output %q, want flag.ErrHelp and the usage", err, out.String())
			}
		})
	}
}

func TestInvalidDatabaseURLsSayWhatIsWrong(t *testing.T) {
	for _, value := range []string{"//h:5432/db", "postgres://u:pwsecret@h:port/db"} {
		t.Run(value, func(t *testing.T) {
			_, err := load(map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": value, "JWT_SECRET": realSecret})
			var ce *Error
			if !errors.As(err, &ce) || ce.Var != "DATABASE_URL" {
				t.Fatalf("got %v, want an error naming DATABASE_URL", err)
			}
			// A phrase, not an empty message or a bare echo of the value.
			if msg := strings.TrimSpace(ce.Msg); !strings.Contains(msg, " ") || strings.HasSuffix(msg, ":") {
				t.Fatalf("%q does not say what is wrong", err)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("%q shows the password", err)
			}
		})
	}
}

func TestErrorIsOneLine(t *testing.T) {
	err := &Error{Var: "DATABASE_URL", Msg: "failed to connect to `user=u`:\n\t127.0.0.1:1: refused\r\n\t127.0.0.1:2: refused\n"}
	if got, want := err.Error(), "invalid DATABASE_URL: failed to connect to `user=u`: 127.0.0.1:1: refused; 127.0.0.1:2: refused"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A node's identity is stable across restarts (same host, same HTTP_ADDR)
// and differs between two nodes of one host, which cannot listen on the
// same address; NODE_ID overrides it.
func TestNodeIDDefaultsToHostAndListenAddress(t *testing.T) {
	defer func(h func() (string, error)) { hostname = h }(hostname)
	hostname = func() (string, error) { return "web1", nil }
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"any interface", map[string]string{"HTTP_ADDR": ":8080"}, "web1:8080"},
		{"embedded default, loopback", nil, "web1/127.0.0.1:8080"},
		{"another port", map[string]string{"HTTP_ADDR": ":8081"}, "web1:8081"},
		{"unspecified address", map[string]string{"HTTP_ADDR": "[::]:8080"}, "web1:8080"},
		{"one address", map[string]string{"HTTP_ADDR": "10.0.0.5:8080"}, "web1/10.0.0.5:8080"},
		{"another address", map[string]string{"HTTP_ADDR": "127.0.0.1:8080"}, "web1/127.0.0.1:8080"},
		{"set", map[string]string{"NODE_ID": "checkout-3"}, "checkout-3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 { // the same on every start
				c, err := load(tc.env)
				if err != nil || c.NodeID != tc.want {
					t.Fatalf("node id %q (%v), want %q", c.NodeID, err, tc.want)
				}
			}
		})
	}
	t.Run("a port chosen at start gives a name of its own", func(t *testing.T) {
		env := map[string]string{"HTTP_ADDR": "127.0.0.1:0"}
		a, err1 := load(env)
		b, err2 := load(env)
		if err1 != nil || err2 != nil || a.NodeID == b.NodeID || !strings.HasPrefix(a.NodeID, "web1:0-") {
			t.Fatalf("node ids %q and %q (%v, %v)", a.NodeID, b.NodeID, err1, err2)
		}
	})
}

// contractVariables reads the variable names of the configuration contract
// (docs/contract/config.md, the repository's copy): the first cell
// of each row of its table, where "A / B" names two.
func contractVariables(tb testing.TB) []string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	path := filepath.Join(dir, "docs", "contract", "config.md")
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	name := regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	var vars []string
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(strings.TrimSpace(line), "|") || len(cells) < 3 {
			continue
		}
		for _, v := range strings.Split(cells[1], "/") {
			if v = strings.TrimSpace(v); name.MatchString(v) {
				vars = append(vars, v)
			}
		}
	}
	if len(vars) == 0 {
		tb.Fatalf("no variables found in %s", path)
	}
	return vars
}

// The table is the one declaration of every setting: each has a flag and a
// variable (the contract's names among them), and the start-up log line
// lists every one, with secrets masked.
func TestEverySettingHasAFlagAVariableAndALogEntry(t *testing.T) {
	var usage strings.Builder
	if _, err := Load([]string{"-h"}, func(string) string { return "" }, &usage, nil); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	byEnv := map[string]setting{}
	for _, s := range settings {
		if _, dup := byEnv[s.env]; dup {
			t.Errorf("%s is declared twice", s.env)
		}
		byEnv[s.env] = s
	}

	t.Run("each setting has a kebab-case flag and a variable in the usage", func(t *testing.T) {
		name := regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
		for _, s := range settings {
			if !name.MatchString(s.env) {
				t.Errorf("%q is not an upper-case variable name", s.env)
			}
			if want := strings.ReplaceAll(strings.ToLower(s.env), "_", "-"); s.flag() != want {
				t.Errorf("%s has flag %q, want %q", s.env, s.flag(), want)
			}
			if !strings.Contains(usage.String(), "  -"+s.flag()+"\n") && !strings.Contains(usage.String(), "  -"+s.flag()+" ") || !strings.Contains(usage.String(), "("+s.env+")") {
				t.Errorf("the usage lacks -%s or (%s):\n%s", s.flag(), s.env, usage.String())
			}
			if s.parse == nil || s.show == nil || s.help == "" {
				t.Errorf("%s lacks its parse, show or help", s.env)
			}
		}
	})

	// As flag.PrintDefaults prints typed flags: the type after the name,
	// none for a boolean, a string's default quoted, a zero one left out.
	t.Run("the usage types each flag", func(t *testing.T) {
		for _, want := range []string{
			"\n  -grab-timeout duration\n", "\n  -grab-batch-size int\n", "\n  -redis-url string\n",
			"\n  -degrade-to-db\n", "\n  -demo\n", `(default "test")`, "(default 10s)",
			"flashsale token", "flashsale solve", "flashsale --version",
		} {
			if !strings.Contains(usage.String(), want) {
				t.Errorf("the usage lacks %q:\n%s", want, usage.String())
			}
		}
		if strings.Contains(usage.String(), "(default false)") || strings.Contains(usage.String(), "(default 0)") {
			t.Errorf("the usage prints a zero default:\n%s", usage.String())
		}
		for _, s := range settings {
			if !slices.Contains([]string{"string", "int", "duration", "bool"}, s.kind) {
				t.Errorf("%s has kind %q", s.env, s.kind)
			}
		}
	})

	t.Run("a boolean flag given alone is true", func(t *testing.T) {
		c, err := load(nil, "--demo=false", "--degrade-to-db")
		if err != nil || !c.DegradeToDB || c.Demo {
			t.Fatalf("--degrade-to-db alone: DegradeToDB %v, Demo %v (%v)", c.DegradeToDB, c.Demo, err)
		}
	})

	t.Run("every Config field has its setting", func(t *testing.T) {
		// Traces holds one setting per field of its own.
		n := 0
		for f := range reflect.TypeFor[Config]().Fields() {
			if f.Type == reflect.TypeFor[Tracing]() {
				n += f.Type.NumField()
			} else {
				n++
			}
		}
		if n != len(settings) {
			t.Fatalf("Config has %d fields and the table %d settings", n, len(settings))
		}
	})

	t.Run("secrets have no default for the usage to print", func(t *testing.T) {
		for _, s := range settings {
			if s.secret && s.def != "" {
				t.Errorf("secret %s has a default", s.env)
			}
		}
	})

	t.Run("the contract's variables are settings", func(t *testing.T) {
		for _, v := range contractVariables(t) {
			if _, ok := byEnv[v]; !ok {
				t.Errorf("contract variable %s is not in the settings table", v)
			}
		}
	})

	t.Run("the start-up log lists every setting and masks secrets", func(t *testing.T) {
		const jwt, pass = "jwt-sentinel-value-0123456789abcdef", "url-sentinel-pass"
		env := map[string]string{
			"REDIS_URL":       "redis://:" + pass + "@127.0.0.1:6379/0",
			"LOCK_REDIS_URLS": "redis://:" + pass + "@127.0.0.1:6379/0",
			"DATABASE_URL":    "postgres://u:" + pass + "@h:5432/db?password=" + pass,
			"ETCD_ENDPOINTS":  "http://u:" + pass + "@127.0.0.1:2379",
			"JWT_SECRET":      jwt,
		}
		c, err := load(env)
		if err != nil {
			t.Fatal(err)
		}
		var line strings.Builder
		slog.New(slog.NewJSONHandler(&line, nil)).Info("starting", "config", c)
		var rec struct{ Config map[string]any }
		if err := json.Unmarshal([]byte(line.String()), &rec); err != nil {
			t.Fatalf("%v: %s", err, line.String())
		}
		for _, s := range settings {
			if _, ok := rec.Config[s.logKey()]; !ok {
				t.Errorf("the log line lacks %s (%s): %s", s.logKey(), s.env, line.String())
			}
		}
		if len(rec.Config) != len(settings) {
			t.Errorf("the log line has %d settings, the table %d", len(rec.Config), len(settings))
		}
		for _, secret := range []string{jwt, pass} {
			if strings.Contains(line.String(), secret) {
				t.Errorf("the log line shows %q: %s", secret, line.String())
			}
		}
		if rec.Config["jwt_secret"] != "***" {
			t.Errorf("jwt_secret logged as %v, want ***", rec.Config["jwt_secret"])
		}
		// Durations as text, not nanoseconds.
		if rec.Config["http_shutdown_timeout"] != "10s" || rec.Config["segment_lease_ttl"] != "3s" {
			t.Errorf("durations logged as %v and %v, want 10s and 3s", rec.Config["http_shutdown_timeout"], rec.Config["segment_lease_ttl"])
		}
	})
}
