package owners

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/config"
	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/persistence"
	"flashsale/usecase/orders"
	"flashsale/usecase/redpackets"
)

// load is config.Load from env and args with the packages' part of the
// settings, as the service loads them.
func load(env map[string]string, args ...string) (config.Config, error) {
	return config.Load(args, func(k string) string { return env[k] }, io.Discard, Table())
}

// withEnv is base with the variables kv (name, value, ...) set.
func withEnv(base map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// realSecret is a JWT_SECRET real mode accepts (at least 32 bytes).
const realSecret = "owners-test-secret-0123456789abcdef"

// Every setting whose package owns its default has it here, so that none
// shows no default (-h, the start-up log, the reference) or goes
// unchecked; and every default here is one a setting reads.
func TestEverySettingAPackageOwnsHasItsDefault(t *testing.T) {
	if p := Table().Problems(); len(p) > 0 {
		t.Fatalf("the owners' table:\n%s", strings.Join(p, "\n"))
	}
}

// Unset, the settings take the packages' defaults: the configuration
// holds zero, which the packages take as these, and Effective (the
// start-up log) shows them; -h prints them.
func TestDefaultsAreThePackages(t *testing.T) {
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.GrabTimeout != 0 || c.PayTimeout != 0 {
		t.Fatalf("unset settings hold %v and %v, want zero", c.GrabTimeout, c.PayTimeout)
	}
	e := c.Effective(Table())
	if e.GrabBatchSize != actors.BatchSizeDefault || e.GrabQueueBound != actors.QueueBoundDefault || e.GrabTimeout != actors.GrabTimeoutDefault ||
		e.PayTimeout != orders.PayTimeoutDefault || e.JWTMaxTTL != auth.MaxTTLDefault || e.MaxResponseBytes != httpapi.MaxAnswerBytesDefault ||
		e.WSMaxOperations != httpapi.WebsocketMaxOperationsDefault || e.RedPacketMaxOpenPerUser != redpackets.MaxOpenPerUserDefault ||
		e.RedPacketMaxPerUserPerDay != redpackets.MaxPerUserPerDayDefault || e.RedPacketRetention != redpackets.RetentionDefault ||
		e.RedisMode != persistence.RedisSingle || e.ShedIPPerSec != httpapi.FloodPerSecDefault {
		t.Fatalf("effective defaults %+v", e)
	}
	var usage strings.Builder
	if _, err := config.Load([]string{"-h"}, func(string) string { return "" }, &usage, Table()); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"(default 30m)", "(default 5s)", `(default "single")`, "(default 1000)"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("the usage lacks %q:\n%s", want, usage.String())
		}
	}
}

// A help that names a package's constant says what the package has.
func TestHelpsSayWhatThePackagesHave(t *testing.T) {
	var usage strings.Builder
	if _, err := config.Load([]string{"-h"}, func(string) string { return "" }, &usage, Table()); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{
		"a token is accepted until " + config.FormatDuration(auth.Leeway) + " past its exp",
		"default " + strconv.Itoa(httpapi.AnonymousInFlightPerCore) + " per core (GOMAXPROCS)",
		"default " + strconv.Itoa(httpapi.AnonymousPerSecondPerCore) + " per core (GOMAXPROCS)",
	} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("the usage lacks %q", want)
		}
	}
}

// The checks that compare with a package's default see it while the
// setting is unset: a write timeout within GRAB_TIMEOUT's default is
// refused, and so is a cost budget under MAX_REQUEST_COST's.
func TestChecksSeeThePackagesDefaults(t *testing.T) {
	for _, tc := range []struct {
		variable, value, says string
	}{
		{"HTTP_WRITE_TIMEOUT", "5s", "GRAB_TIMEOUT (5s)"},
		{"COST_BUDGET", "100", "MAX_REQUEST_COST"},
		{"INTROSPECTION", "maybe", "want off, token or public"},
		{"POW_DIFFICULTY", "33", "want 1 to 32"},
	} {
		_, err := load(map[string]string{tc.variable: tc.value})
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Var != tc.variable || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s=%s: got %v, want an error naming it that says %q", tc.variable, tc.value, err, tc.says)
		}
	}
}

// CORS_ALLOWED_ORIGINS' patterns and EMBEDDED_ALLOWED_HOSTS' names are
// httpapi's to check: one that is no origin, or a host with a port, a
// scheme or a wildcard, stops the start with a line naming the variable.
func TestOriginsAndHostsAreChecked(t *testing.T) {
	real := map[string]string{"DATABASE_URL": "postgres://u@h:5432/d", "REDIS_URL": "redis://127.0.0.1:6379/0", "JWT_SECRET": realSecret}
	for _, bad := range []string{"localhost:5173", "http://localhost:5173/", "ftp://x", "http://*.*.example.com", "https://a.example/path", "none,http://x"} {
		_, err := load(withEnv(real, "CORS_ALLOWED_ORIGINS", bad))
		if err == nil || !strings.Contains(err.Error(), "CORS_ALLOWED_ORIGINS") {
			t.Errorf("%q: %v, want refused naming CORS_ALLOWED_ORIGINS", bad, err)
		}
	}
	for _, bad := range []string{"flashsale.test:8080", "http://flashsale.test", "*.example.com"} {
		_, err := load(map[string]string{"EMBEDDED_ALLOWED_HOSTS": bad})
		if err == nil || !strings.Contains(err.Error(), "EMBEDDED_ALLOWED_HOSTS") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
}

// Real mode refuses an HMAC key shorter than 32 bytes, JWT_SECRET's and
// TICKET_SECRET's, at start, with the variable named and the secret not
// shown; the embedded mode makes its own and takes a given one as is.
func TestShortSecretsAreRefusedInRealMode(t *testing.T) {
	real := map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": "postgres://u@h:5432/d"}
	cases := []struct {
		name    string
		env     map[string]string
		refused string // the variable named, "" = accepted
	}{
		{"3-byte jwt secret", withEnv(real, "JWT_SECRET", "abc"), "JWT_SECRET"},
		{"31-byte jwt secret", withEnv(real, "JWT_SECRET", strings.Repeat("x", 31)), "JWT_SECRET"},
		{"32-byte jwt secret", withEnv(real, "JWT_SECRET", strings.Repeat("x", 32)), ""},
		{"short ticket secret", withEnv(real, "JWT_SECRET", realSecret, "TICKET_SECRET", "tkt"), "TICKET_SECRET"},
		{"ticket secret derived", withEnv(real, "JWT_SECRET", realSecret), ""},
		{"embedded mode takes a short one", map[string]string{"JWT_SECRET": "abc"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.env)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Var != tc.refused || !strings.Contains(err.Error(), "at least 32 bytes") {
				t.Fatalf("err %v, want invalid %s: at least 32 bytes", err, tc.refused)
			}
			if strings.Contains(err.Error(), tc.env[tc.refused]) {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}

// Introspection is public when embedded (the playground shows the
// schema before a token is pasted) and needs a token with real stores,
// unless INTROSPECTION says otherwise; true and false, its values when it
// was a switch, still mean public and off.
func TestIntrospectionDefaultsPerMode(t *testing.T) {
	real := map[string]string{"DATABASE_URL": "postgres://u@h:5432/d", "REDIS_URL": "redis://127.0.0.1:6379/0", "JWT_SECRET": realSecret}
	withReal := func(v string) map[string]string { return withEnv(real, "INTROSPECTION", v) }
	for _, tc := range []struct {
		name string
		env  map[string]string
		want graph.IntrospectionMode
	}{
		{"embedded", nil, graph.IntrospectionPublic},
		{"real stores", real, graph.IntrospectionToken},
		{"real stores, opened", withReal("public"), graph.IntrospectionPublic},
		{"real stores, off", withReal("OFF"), graph.IntrospectionOff},
		{"embedded, token", map[string]string{"INTROSPECTION": "token"}, graph.IntrospectionToken},
		{"true is public", withReal("true"), graph.IntrospectionPublic},
		{"false is off", map[string]string{"INTROSPECTION": "false"}, graph.IntrospectionOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			if err != nil || graph.IntrospectionMode(c.Introspection) != tc.want {
				t.Fatalf("INTROSPECTION %q (%v), want %q", c.Introspection, err, tc.want)
			}
		})
	}
}

func TestInvalidRedisURLsSayWhatIsWrong(t *testing.T) {
	real := map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/0", "DATABASE_URL": "postgres://u@h:5432/db", "JWT_SECRET": realSecret}
	cases := []struct{ variable, value string }{
		{"REDIS_URL", "//h:6379"},
		{"REDIS_URL", "127.0.0.1:6379"},
		{"REDIS_URL", "http://h:6379"},
		{"REDIS_URL", "redis://:pwsecret@h:6379/abc"},
		{"REDIS_URL", "redis://:pwsecret@h:6379/1/2"},
		{"REDIS_URL", "redis://:pwsecret@h:6379/0?bogus=1"},
		{"REDIS_URL", "redis://:pwsecret@h:6379/0?dial_timeout=soon"},
		{"REDIS_URL", "redis://:pwsecret@h:port/0"},
		{"REDIS_URL", "redis://:pw%zzsecret@h:6379/0"},
		{"REDIS_URL", "unix://"},
		{"LOCK_REDIS_URLS", "//h:6379"},
		{"LOCK_REDIS_URLS", "redis://:pwsecret@h:6379/abc"},
	}
	for _, tc := range cases {
		t.Run(tc.variable+"="+tc.value, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range real {
				env[k] = v
			}
			env[tc.variable] = tc.value
			_, err := load(env)
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Var != tc.variable {
				t.Fatalf("got %v, want an error naming %s", err, tc.variable)
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

// REDIS_MODE decides which of go-redis's URL forms REDIS_URL must have;
// a URL that does not parse in its mode and a mode without REDIS_URL are
// refused naming the variable at fault.
// Acknowledgements need a Redis of its own and a timeout WAIT can count
// and a grab can wait out.
func TestRedisModesAndAcknowledgements(t *testing.T) {
	const (
		single   = "redis://:pwsecret@127.0.0.1:6379/0"
		failover = "redis://:pwsecret@127.0.0.1:26379/0?master_name=fs&addr=127.0.0.1:26380&password=pwsecret"
		cluster  = "redis://:pwsecret@127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002"
	)
	base := map[string]string{"DATABASE_URL": "postgres://u@h:5432/db", "JWT_SECRET": realSecret}
	env := func(kv ...string) map[string]string { return withEnv(base, kv...) }
	cases := []struct {
		name    string
		env     map[string]string
		refused string // the variable named, "" = accepted
		says    string // a phrase the refusal holds
	}{
		{"single by default", env("REDIS_URL", single), "", ""},
		{"sentinel with a failover URL", env("REDIS_MODE", "sentinel", "REDIS_URL", failover), "", ""},
		{"mode in capitals", env("REDIS_MODE", "SENTINEL", "REDIS_URL", failover), "", ""},
		{"acknowledged by two replicas", env("REDIS_MODE", "sentinel", "REDIS_URL", failover, "REDIS_ACK_REPLICAS", "2", "REDIS_ACK_TIMEOUT", "50ms"), "", ""},
		{"unknown mode", env("REDIS_MODE", "ring", "REDIS_URL", single), "REDIS_MODE", "single, sentinel, cluster"},
		{"sentinel without REDIS_URL", env("REDIS_MODE", "sentinel", "ALLOW_EMBEDDED_REDIS", "true"), "REDIS_MODE", "needs REDIS_URL"},
		{"cluster", env("REDIS_MODE", "cluster", "REDIS_URL", cluster), "", ""},
		{"cluster acknowledged by a replica", env("REDIS_MODE", "cluster", "REDIS_URL", cluster, "REDIS_ACK_REPLICAS", "1"), "", ""},
		{"cluster read from replicas", env("REDIS_MODE", "cluster", "REDIS_URL", cluster+"&read_only=true"), "REDIS_URL", "primary"},
		{"single with a failover URL", env("REDIS_URL", failover), "REDIS_URL", "master_name"},
		{"sentinel without master_name", env("REDIS_MODE", "sentinel", "REDIS_URL", single), "REDIS_URL", "master_name is required"},
		{"sentinel routed to replicas", env("REDIS_MODE", "sentinel", "REDIS_URL", failover+"&replica_only=true"), "REDIS_URL", "primary"},
		{"sentinel with a unix socket", env("REDIS_MODE", "sentinel", "REDIS_URL", "unix:///tmp/redis.sock"), "REDIS_URL", "failover URL"},
		{"another lock node in the failover form", env("REDIS_MODE", "sentinel", "REDIS_URL", failover, "LOCK_REDIS_URLS", strings.Replace(failover, "26379", "26999", 1)), "LOCK_REDIS_URLS", "master_name"},
		{"negative replicas", env("REDIS_URL", single, "REDIS_ACK_REPLICAS", "-1"), "REDIS_ACK_REPLICAS", ">= 0"},
		{"replicas of the in-process redis", env("ALLOW_EMBEDDED_REDIS", "true", "REDIS_ACK_REPLICAS", "1"), "REDIS_ACK_REPLICAS", "no replicas"},
		{"acknowledgement under a millisecond", env("REDIS_URL", single, "REDIS_ACK_REPLICAS", "1", "REDIS_ACK_TIMEOUT", "500us"), "REDIS_ACK_TIMEOUT", "1ms"},
		{"acknowledgement as long as a grab", env("REDIS_URL", single, "REDIS_ACK_REPLICAS", "1", "REDIS_ACK_TIMEOUT", "5s"), "REDIS_ACK_TIMEOUT", "GRAB_TIMEOUT (5s) less 200ms"},
		{"acknowledgement without room in a grab", env("REDIS_URL", single, "REDIS_ACK_REPLICAS", "1", "REDIS_ACK_TIMEOUT", "900ms", "GRAB_TIMEOUT", "1s"), "REDIS_ACK_TIMEOUT", "GRAB_TIMEOUT (1s) less 200ms"},
		{"no acknowledgements: the timeout is not checked against a short grab", env("REDIS_URL", single, "GRAB_TIMEOUT", "300ms"), "", ""},
		{"acknowledgement with just the room", env("REDIS_URL", single, "REDIS_ACK_REPLICAS", "1", "REDIS_ACK_TIMEOUT", "800ms", "GRAB_TIMEOUT", "1s"), "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				// The default lock node is REDIS_URL, reached in its mode.
				if len(c.LockRedisURLs) != 1 || persistence.LockNodeMode(c.RedisMode, c.RedisURL, c.LockRedisURLs[0]) != c.RedisMode {
					t.Fatalf("lock nodes %v in mode %s", c.LockRedisURLs, c.RedisMode)
				}
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Var != tc.refused || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error naming %s that says %q", err, tc.refused, tc.says)
			}
			if strings.Contains(err.Error(), "pwsecret") {
				t.Fatalf("%q shows the password", err)
			}
		})
	}
	c, err := load(env("REDIS_URL", single))
	c = c.Effective(Table())
	if err != nil || c.RedisMode != "single" || c.RedisAckReplicas != 0 || c.RedisAckTimeout != 200*time.Millisecond {
		t.Fatalf("defaults: mode %q, %d replicas within %s (%v), want single, 0 and 200ms", c.RedisMode, c.RedisAckReplicas, c.RedisAckTimeout, err)
	}
}

// The operators' settings reference is the table, generated with the
// packages' defaults: a setting or a default added, removed or changed
// without `go generate ./config` fails here. Not parallel: the reference works defaults out with GOMAXPROCS
// changed for a moment.
func TestOperationsShowsTheGeneratedSettingsReference(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.ReferenceIn(doc)
	if err != nil {
		t.Fatalf("docs/OPERATIONS.md: %v", err)
	}
	want := strings.TrimSpace(config.Reference(Table))
	if got == want {
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("docs/OPERATIONS.md's settings reference is not the table's (run go generate ./config); first difference, line %d:\n got: %s\nwant: %s", i+1, g, w)
		}
	}
}
