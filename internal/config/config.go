// Package config reads the service's configuration from the environment
// and flags (a flag wins over its variable), applies defaults and validates
// it, so that a wrong value stops the service at start with one clear line
// naming the variable.
package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// Config is the whole configuration. Field comments name the variable; the
// flag is the same name in kebab case (REDIS_URL -> --redis-url).
type Config struct {
	HTTPAddr      string        // HTTP_ADDR
	RedisURL      string        // REDIS_URL; empty = embedded in-process Redis
	LockRedisURLs []string      // LOCK_REDIS_URLS; default = REDIS_URL
	DatabaseURL   string        // DATABASE_URL; empty = embedded SQLite at SQLitePath
	SQLitePath    string        // SQLITE_PATH (ours): the embedded database file
	JWTSecret     string        // JWT_SECRET
	PayTimeout    time.Duration // PAY_TIMEOUT

	ClusterProvider        string   // CLUSTER_PROVIDER: test, automanaged, etcd
	ClusterName            string   // CLUSTER_NAME
	ClusterHost            string   // CLUSTER_HOST
	ClusterPort            int      // CLUSTER_PORT
	ClusterSeeds           []string // CLUSTER_SEEDS
	ClusterAutomanagedPort int      // CLUSTER_AUTOMANAGED_PORT
	EtcdEndpoints          []string // ETCD_ENDPOINTS

	RateUserPerSec    int // RATE_USER_PER_SEC
	RateVoucherPerSec int // RATE_VOUCHER_PER_SEC
	RateIPPerSec      int // RATE_IP_PER_SEC

	LogLevel  string // LOG_LEVEL
	LogFormat string // LOG_FORMAT

	// NodeID (NODE_ID, ours) is this node's identity, stable across its
	// restarts: its consumer name in the order logs' group, so that a
	// restarted node resumes the orders it left pending at once. Default:
	// the host name and HTTP_ADDR's port (and host, if one is given), so
	// two nodes of one host differ by their listen address.
	NodeID string

	// OrderLogClaimIdle (ORDER_LOG_CLAIM_IDLE, ours): how long an order-log
	// entry may sit unacknowledged with a writer before another node takes
	// it over (the first writer is presumed dead).
	OrderLogClaimIdle time.Duration

	// GrabBatchSize (GRAB_BATCH_SIZE, ours) caps the grabs of one script
	// call; GrabQueueBound (GRAB_QUEUE_BOUND, ours) the grabs waiting for one
	// voucher on this node before new ones are answered UNAVAILABLE.
	GrabBatchSize  int
	GrabQueueBound int

	Introspection bool // INTROSPECTION (ours): schema introspection on /query
	Demo          bool // DEMO (ours): create a demo voucher and print tokens; default on in embedded mode
}

// Embedded reports the zero-configuration mode: neither Redis nor the
// database is configured, so both run in-process.
func (c Config) Embedded() bool { return c.RedisURL == "" && c.DatabaseURL == "" }

// Error is a configuration error; its message is the one line printed.
type Error struct {
	Var string
	Msg string
}

// Error is one line even when Msg quotes a multi-line error (pgx lists every
// host it tried on a line of its own): the operator reads one line per
// failed start, and log collectors split records on newlines.
func (e *Error) Error() string { return "invalid " + e.Var + ": " + oneLine(e.Msg) }

// Load reads the configuration from getenv and args (without the program
// name). The usage goes to out when asked for (-h), and Load then returns
// flag.ErrHelp; any other flag error is returned as one line.
func Load(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	fs := flag.NewFlagSet("flashsale", flag.ContinueOnError)
	// The flag package prints the whole usage after every parse error; a
	// mistyped flag should give one line naming it, so usage is printed
	// below, and only for -h.
	fs.SetOutput(io.Discard)
	// Defaults are static and the environment is applied after parsing:
	// a default taken from the environment would be printed by the usage
	// ("(default "...")"), and with it JWT_SECRET and database passwords.
	str := func(name, def, usage string) *string {
		return fs.String(flagName(name), def, usage+" ("+name+")")
	}
	raw := map[string]*string{
		"HTTP_ADDR":                str("HTTP_ADDR", ":8080", "listen address"),
		"NODE_ID":                  str("NODE_ID", "", "this node's stable identity; default host name and HTTP_ADDR"),
		"REDIS_URL":                str("REDIS_URL", "", "stock Redis URL; empty runs an in-process Redis"),
		"LOCK_REDIS_URLS":          str("LOCK_REDIS_URLS", "", "comma-separated Redlock nodes; default REDIS_URL"),
		"DATABASE_URL":             str("DATABASE_URL", "", "Postgres URL; empty uses the embedded SQLite file"),
		"SQLITE_PATH":              str("SQLITE_PATH", "flashsale.db", "embedded SQLite database file"),
		"JWT_SECRET":               str("JWT_SECRET", "", "HS256 secret; required unless embedded"),
		"PAY_TIMEOUT":              str("PAY_TIMEOUT", "30m", "unpaid orders are cancelled after this"),
		"CLUSTER_PROVIDER":         str("CLUSTER_PROVIDER", "test", "test, automanaged or etcd"),
		"CLUSTER_NAME":             str("CLUSTER_NAME", "flashsale", "cluster name"),
		"CLUSTER_HOST":             str("CLUSTER_HOST", "127.0.0.1", "actor remoting host"),
		"CLUSTER_PORT":             str("CLUSTER_PORT", "0", "actor remoting port (0 = any)"),
		"CLUSTER_SEEDS":            str("CLUSTER_SEEDS", "", "automanaged: host:port of every member"),
		"CLUSTER_AUTOMANAGED_PORT": str("CLUSTER_AUTOMANAGED_PORT", "", "automanaged: this member's port"),
		"ETCD_ENDPOINTS":           str("ETCD_ENDPOINTS", "", "etcd: comma-separated endpoints"),
		"RATE_USER_PER_SEC":        str("RATE_USER_PER_SEC", "10", "grabs per second per user (0 = off)"),
		"RATE_VOUCHER_PER_SEC":     str("RATE_VOUCHER_PER_SEC", "0", "grabs per second per voucher (0 = off)"),
		"RATE_IP_PER_SEC":          str("RATE_IP_PER_SEC", "0", "requests per second per client IP (0 = off)"),
		"LOG_LEVEL":                str("LOG_LEVEL", "info", "debug, info, warn or error"),
		"LOG_FORMAT":               str("LOG_FORMAT", "", "text or json; default text embedded, json otherwise"),
		"ORDER_LOG_CLAIM_IDLE":     str("ORDER_LOG_CLAIM_IDLE", "30s", "take over order-log entries pending this long with a dead node"),
		"GRAB_BATCH_SIZE":          str("GRAB_BATCH_SIZE", "256", "grabs per script call, at most"),
		"GRAB_QUEUE_BOUND":         str("GRAB_QUEUE_BOUND", "8192", "grabs waiting per voucher before shedding"),
		"INTROSPECTION":            str("INTROSPECTION", "true", "allow schema introspection"),
		"DEMO":                     str("DEMO", "", "create a demo voucher and print tokens; default on when embedded"),
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(out)
		fmt.Fprintln(out, "Usage of flashsale (each flag can also be set by the variable in brackets; a flag wins):")
		fs.PrintDefaults()
		return Config{}, err
	} else if err != nil {
		return Config{}, fmt.Errorf("%w (see --help)", err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, p := range raw {
		if v := strings.TrimSpace(getenv(name)); v != "" && !set[flagName(name)] {
			*p = v
		}
	}
	v := func(name string) string { return strings.TrimSpace(*raw[name]) }
	c := Config{
		HTTPAddr:        v("HTTP_ADDR"),
		NodeID:          v("NODE_ID"),
		RedisURL:        v("REDIS_URL"),
		LockRedisURLs:   list(v("LOCK_REDIS_URLS")),
		DatabaseURL:     v("DATABASE_URL"),
		SQLitePath:      v("SQLITE_PATH"),
		JWTSecret:       *raw["JWT_SECRET"],
		ClusterProvider: v("CLUSTER_PROVIDER"),
		ClusterName:     v("CLUSTER_NAME"),
		ClusterHost:     v("CLUSTER_HOST"),
		ClusterSeeds:    list(v("CLUSTER_SEEDS")),
		EtcdEndpoints:   list(v("ETCD_ENDPOINTS")),
		LogLevel:        strings.ToLower(v("LOG_LEVEL")),
		LogFormat:       strings.ToLower(v("LOG_FORMAT")),
	}
	var err error
	parse := func(name string, f func(string) error) {
		if err == nil {
			if e := f(v(name)); e != nil {
				err = &Error{Var: name, Msg: e.Error()}
			}
		}
	}
	parse("PAY_TIMEOUT", func(s string) error { return duration(s, &c.PayTimeout) })
	parse("ORDER_LOG_CLAIM_IDLE", func(s string) error { return duration(s, &c.OrderLogClaimIdle) })
	parse("CLUSTER_PORT", func(s string) error { return port(s, &c.ClusterPort, true) })
	parse("CLUSTER_AUTOMANAGED_PORT", func(s string) error {
		if s == "" {
			return nil
		}
		return port(s, &c.ClusterAutomanagedPort, false)
	})
	parse("RATE_USER_PER_SEC", func(s string) error { return rate(s, &c.RateUserPerSec) })
	parse("RATE_VOUCHER_PER_SEC", func(s string) error { return rate(s, &c.RateVoucherPerSec) })
	parse("RATE_IP_PER_SEC", func(s string) error { return rate(s, &c.RateIPPerSec) })
	parse("GRAB_BATCH_SIZE", func(s string) error { return positive(s, &c.GrabBatchSize) })
	parse("GRAB_QUEUE_BOUND", func(s string) error { return positive(s, &c.GrabQueueBound) })
	parse("INTROSPECTION", func(s string) error { return boolean(s, &c.Introspection) })
	parse("DEMO", func(s string) error {
		c.Demo = c.Embedded()
		if s == "" {
			return nil
		}
		return boolean(s, &c.Demo)
	})
	if err != nil {
		return Config{}, err
	}
	if c.NodeID == "" {
		host, err := hostname()
		if err != nil || host == "" {
			host = "node"
		}
		c.NodeID = DefaultNodeID(host, c.HTTPAddr)
	}
	if len(c.LockRedisURLs) == 0 && c.RedisURL != "" {
		c.LockRedisURLs = []string{c.RedisURL}
	}
	if c.LogFormat == "" {
		c.LogFormat = "json"
		if c.Embedded() {
			c.LogFormat = "text"
		}
	}
	return c, c.Validate()
}

// Validate checks every value and returns the first problem.
func (c Config) Validate() error {
	bad := func(name, format string, args ...any) error {
		return &Error{Var: name, Msg: fmt.Sprintf(format, args...)}
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return bad("HTTP_ADDR", "want host:port, e.g. :8080")
	}
	if msg := nodeIDProblem(c.NodeID); msg != "" {
		return bad("NODE_ID", "%s", msg)
	}
	if c.RedisURL != "" {
		if msg := redisURLProblem(c.RedisURL); msg != "" {
			return bad("REDIS_URL", "%s", msg)
		}
	}
	for _, u := range c.LockRedisURLs {
		if msg := redisURLProblem(u); msg != "" {
			return bad("LOCK_REDIS_URLS", "%q: %s", redactURL(u), msg)
		}
	}
	if n := len(c.LockRedisURLs); n > 0 && n%2 == 0 {
		return bad("LOCK_REDIS_URLS", "Redlock needs an odd number of independent nodes (1, 3 or 5), got %d", n)
	}
	if c.DatabaseURL != "" {
		u, err := url.Parse(c.DatabaseURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			return bad("DATABASE_URL", "want postgres://user@host:port/db")
		}
	}
	if !c.Embedded() && c.JWTSecret == "" {
		return bad("JWT_SECRET", "required when REDIS_URL or DATABASE_URL is set")
	}
	if c.PayTimeout <= 0 {
		return bad("PAY_TIMEOUT", "must be positive")
	}
	if c.OrderLogClaimIdle <= 0 {
		return bad("ORDER_LOG_CLAIM_IDLE", "must be positive")
	}
	switch c.ClusterProvider {
	case "test":
	case "automanaged":
		if len(c.ClusterSeeds) == 0 {
			return bad("CLUSTER_SEEDS", "required with CLUSTER_PROVIDER=automanaged")
		}
		for _, s := range c.ClusterSeeds {
			if _, _, err := net.SplitHostPort(s); err != nil {
				return bad("CLUSTER_SEEDS", "%q is not host:port", s)
			}
		}
		if c.ClusterAutomanagedPort == 0 {
			return bad("CLUSTER_AUTOMANAGED_PORT", "required with CLUSTER_PROVIDER=automanaged")
		}
	case "etcd":
		if len(c.EtcdEndpoints) == 0 {
			return bad("ETCD_ENDPOINTS", "required with CLUSTER_PROVIDER=etcd")
		}
	default:
		return bad("CLUSTER_PROVIDER", "want test, automanaged or etcd")
	}
	if c.ClusterName == "" {
		return bad("CLUSTER_NAME", "must not be empty")
	}
	if _, err := c.Level(); err != nil {
		return bad("LOG_LEVEL", "want debug, info, warn or error")
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("LOG_FORMAT", "want text or json")
	}
	return nil
}

// Level is the slog level named by LogLevel.
func (c Config) Level() (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(c.LogLevel))
	return l, err
}

// LogValue logs the configuration with secrets masked: the JWT secret and
// any password inside a URL, as its user's or as a query parameter.
func (c Config) LogValue() slog.Value {
	secret := "(unset)"
	if c.JWTSecret != "" {
		secret = "***"
	}
	urls := func(us []string) string {
		out := make([]string, len(us))
		for i, u := range us {
			out[i] = redactURL(u)
		}
		return strings.Join(out, ",")
	}
	return slog.GroupValue(
		slog.String("http_addr", c.HTTPAddr),
		slog.String("node_id", c.NodeID),
		slog.String("redis_url", orEmbedded(redactURL(c.RedisURL))),
		slog.String("lock_redis_urls", urls(c.LockRedisURLs)),
		slog.String("database_url", orEmbedded(redactURL(c.DatabaseURL))),
		slog.String("jwt_secret", secret),
		slog.Duration("pay_timeout", c.PayTimeout),
		slog.String("cluster_provider", c.ClusterProvider),
		slog.String("cluster_name", c.ClusterName),
		slog.Int("rate_user_per_sec", c.RateUserPerSec),
		slog.Int("rate_voucher_per_sec", c.RateVoucherPerSec),
		slog.Int("rate_ip_per_sec", c.RateIPPerSec),
		slog.String("log_level", c.LogLevel),
		slog.String("log_format", c.LogFormat),
	)
}

func orEmbedded(s string) string {
	if s == "" {
		return "(embedded)"
	}
	return s
}

// redactURL hides the passwords of a URL: the user's, and any query
// parameter named like a password (Postgres reads ?password= and
// ?sslpassword=). Pairs are rewritten in place, which keeps their order;
// url.Values would sort them.
func redactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable)"
	}
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, p := range pairs {
			key, _, _ := strings.Cut(p, "=")
			name := key
			if k, err := url.QueryUnescape(key); err == nil {
				name = k
			}
			if strings.Contains(strings.ToLower(name), "password") {
				pairs[i] = key + "=xxxxx"
			}
		}
		u.RawQuery = strings.Join(pairs, "&")
	}
	return u.Redacted()
}

// redisURLProblem says what is wrong with a Redis URL, or returns "". It
// checks the scheme itself because go-redis reports a missing one as
// "invalid URL scheme: " with nothing after it.
func redisURLProblem(s string) string {
	const want = "want redis://host:port/db (or rediss://, unix://)"
	if !strings.Contains(s, "://") { // host:port alone fails url.Parse obscurely
		return want
	}
	u, err := url.Parse(s)
	if err != nil {
		return "not a URL: " + errMsg(err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix" {
		return want
	}
	if _, err := redis.ParseURL(s); err != nil {
		return errMsg(err)
	}
	return ""
}

// hostname is os.Hostname; tests replace it.
var hostname = os.Hostname

// DefaultNodeID derives a node's identity from its host name and listen
// address: the same on every restart of the same node, different for two
// nodes of one host (they cannot listen on the same address). A port
// chosen at start (0) gives no stable identity, so such a node gets a
// random one: it never shares a name, and the name it leaves behind is
// removed once idle.
func DefaultNodeID(host, httpAddr string) string {
	h, port, err := net.SplitHostPort(httpAddr)
	switch {
	case err != nil:
		return host // HTTP_ADDR is refused by Validate
	case port == "" || port == "0":
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		return host + ":0-" + hex.EncodeToString(b)
	case h == "" || net.ParseIP(h).IsUnspecified():
		return host + ":" + port
	default:
		return host + "/" + net.JoinHostPort(h, port)
	}
}

// nodeIDProblem says what is wrong with a node id, or returns "": it names
// the node in Redis and in logs, so it is short and printable.
func nodeIDProblem(id string) string {
	if id == "" || len(id) > 128 {
		return "want 1 to 128 characters"
	}
	for _, r := range id {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return "want printable characters without spaces"
		}
	}
	return ""
}

func flagName(env string) string { return strings.ReplaceAll(strings.ToLower(env), "_", "-") }

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func duration(s string, dst *time.Duration) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 30m or 90s")
	}
	*dst = d
	return nil
}

func port(s string, dst *int, zeroOK bool) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !zeroOK) {
		return errors.New("want a port number")
	}
	*dst = n
	return nil
}

func rate(s string, dst *int) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return errors.New("want a whole number >= 0 (0 = off)")
	}
	*dst = n
	return nil
}

func positive(s string, dst *int) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return errors.New("want a whole number >= 1")
	}
	*dst = n
	return nil
}

func boolean(s string, dst *bool) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*dst = b
	return nil
}

// errMsg says what a URL parse error found wrong without echoing the URL,
// which may hold a password: url.Error quotes the whole input, so only its
// cause is kept. go-redis errors name the part at fault (database number,
// option) and keep their text, less the package prefix.
func errMsg(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := strings.TrimPrefix(err.Error(), "redis: ")
	if msg = strings.TrimRight(msg, ": "); msg == "" {
		return "malformed URL"
	}
	return msg
}

// oneLine joins the lines of a message, keeping each line's text.
func oneLine(s string) string {
	var b strings.Builder
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(line)
	}
	return b.String()
}
