// Package config reads the service's configuration from the environment
// and flags (a flag wins over its variable), applies defaults and validates
// it, so that a wrong value stops the service at start with one clear line
// naming the variable.
package config

import (
	"cmp"
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
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Config is the whole configuration: the values given. Each field is one
// setting of the table in settings.go, which names its variable, flag,
// default and help; the flag is the variable in kebab case (REDIS_URL ->
// --redis-url). A setting whose default its package owns holds its zero
// value when unset, which that package takes as its default (Effective
// shows those defaults); one whose 0 means off holds Off when set to 0.
type Config struct {
	HTTPAddr string
	// NodeID is this node's identity, stable across its restarts: its
	// consumer name in the order logs' group, so that a restarted node
	// resumes the orders it left pending at once (see DefaultNodeID).
	NodeID string
	// RedisMode is how RedisURL reaches Redis: persistence.RedisSingle
	// (the default), RedisSentinel or RedisCluster, each with go-redis's
	// URL form.
	RedisMode     string
	RedisURL      string   // empty = embedded in-process Redis
	LockRedisURLs []string // default = RedisURL
	// RedisAckReplicas is how many replicas must hold a grab batch's
	// writes before its answers are given (WAIT), within RedisAckTimeout;
	// 0 = the primary alone.
	RedisAckReplicas int
	RedisAckTimeout  time.Duration
	// RedisAckAOF makes the acknowledgement also cover the fsync of the
	// primary's and the replicas' append-only files (WAITAOF) where the
	// primary has it.
	RedisAckAOF bool
	DatabaseURL string // empty = embedded SQLite at SQLitePath
	// DatabaseMaxConns bounds the node's Postgres connection pool.
	DatabaseMaxConns int
	SQLitePath       string
	JWTSecret        string
	// AllowEmbeddedRedis lets real mode (DATABASE_URL set) run on an
	// in-process Redis, which is refused otherwise: it dies with the
	// process, and nodes sharing the database would each have their own.
	AllowEmbeddedRedis bool
	// JWTMaxTTL bounds a token's lifetime: tokens without exp, or living
	// longer, are refused, so a leaked token stops working within it.
	JWTMaxTTL  time.Duration
	PayTimeout time.Duration
	// PayTimeoutInterval is how often the pay-timeout cancellation runs;
	// ReconcileInterval how often the background reconciliation does.
	PayTimeoutInterval time.Duration
	ReconcileInterval  time.Duration
	// StatusSyncInterval is how often every node re-applies to Redis the
	// voucher statuses Redis missed (catalog.StatusSync): the bound on how
	// long a voucher paused in the database can still sell.
	StatusSyncInterval time.Duration
	// RedPacketRefundInterval is how often one node refunds expired red
	// packets; RedPacketRefundGrace how long after expiry it waits.
	RedPacketRefundInterval time.Duration
	RedPacketRefundGrace    time.Duration
	// RedPacketMaxOpenPerUser is how many open red packets (neither
	// refunded nor fully grabbed) one user may have at once.
	RedPacketMaxOpenPerUser int
	// RedPacketMaxPerUserPerDay is how many red packets one user may
	// create within any 24 hours.
	RedPacketMaxPerUserPerDay int
	// RedPacketRetention is how long a settled (refunded) red packet stays
	// in the database after its refund.
	RedPacketRetention time.Duration

	ClusterProvider        string // test, automanaged, etcd
	ClusterName            string
	ClusterHost            string
	ClusterPort            int
	ClusterSeeds           []string
	ClusterAutomanagedPort int
	// SegmentLeaseTTL is the Redlock lease a segment activation holds
	// while it serves (renewed at a third of it): how long a member that
	// died keeps its segments from being served elsewhere.
	SegmentLeaseTTL time.Duration
	EtcdEndpoints   []string

	RateUserPerSec    int
	RateVoucherPerSec int
	RateIPPerSec      int

	LogLevel  string
	LogFormat string

	// OrderLogClaimIdle: how long an order-log entry may sit
	// unacknowledged with a writer before another node takes it over (the
	// first writer is presumed dead).
	OrderLogClaimIdle time.Duration
	// OrderLogLinger: how long a log writer waits after a batch that did
	// not fill before it reads the next (Off: not at all).
	OrderLogLinger time.Duration

	// GrabBatchSize caps the grabs of one script call; GrabQueueBound the
	// grabs waiting for one voucher on this node before new ones are
	// answered UNAVAILABLE.
	GrabBatchSize  int
	GrabQueueBound int

	// GrabTimeout bounds how long a grab waits for its answer, and so how
	// long the router waits at shutdown for the grabs already queued.
	GrabTimeout time.Duration
	// OrderLogDrainTimeout bounds how long shutdown waits for accepted
	// orders to leave the order log for the database.
	OrderLogDrainTimeout time.Duration
	// HTTPShutdownTimeout bounds how long shutdown waits for open requests.
	HTTPShutdownTimeout time.Duration
	// HTTPDrainDelay is how long a stopping node keeps serving with /readyz
	// at 503 before it closes its listener, so load balancers stop sending
	// first (0 = close at once).
	HTTPDrainDelay time.Duration
	// HTTPHeaderTimeout, HTTPBodyTimeout and HTTPWriteTimeout bound what a
	// client can hold of a connection by being slow: sending its headers,
	// sending its body (from the end of the headers), and reading the
	// answer (from the end of the headers). Websockets are exempt from the
	// last two; they have pings and write deadlines of their own.
	HTTPHeaderTimeout time.Duration
	HTTPBodyTimeout   time.Duration
	HTTPWriteTimeout  time.Duration

	// MaxResponseBytes caps one GraphQL answer: a larger one is replaced by
	// an error, so that no request makes the node buffer an answer of
	// hundreds of MB.
	MaxResponseBytes int
	// MaxRequestCost caps one request's cost in points, known before it
	// runs; CostBudget and CostRestorePerSec are each caller's budget of
	// request cost (a bucket of CostBudget points refilled at
	// CostRestorePerSec; Off = no budget). See httpapi.CostBudget.
	MaxRequestCost    int
	CostBudget        int
	CostRestorePerSec int
	// WSMaxOperations bounds the operations running at once on one
	// websocket connection; one more gets a RATE_LIMITED error for itself.
	WSMaxOperations int
	// WSMaxPerUser and WSMaxPerIP cap the websockets open at once on this
	// node per user and per client address; one more is closed with 4429.
	WSMaxPerUser int
	WSMaxPerIP   int
	// WSSubscribesPerSec is the rate of operations one websocket may
	// start; WSMaxUninitialized caps the sockets on this node that have
	// not sent connection_init.
	WSSubscribesPerSec int
	WSMaxUninitialized int
	// CORSAllowedOrigins are the origins whose pages may call /query (and
	// open its websocket); ["none"] or empty: the service's own only.
	// See CORSOrigins.
	CORSAllowedOrigins []string
	// EmbeddedAllowedHosts are the Hosts embedded mode answers besides
	// localhost and the loopback addresses (httpapi.LocalHosts).
	EmbeddedAllowedHosts []string
	// HTTPMaxHeaderBytes is the server's MaxHeaderBytes: a larger request
	// line and headers are answered 431 before they are read whole.
	HTTPMaxHeaderBytes int

	// ConnPerIPPerSec and ConnPerIPBurst are the rate of new connections
	// per client address (Off = off); ConnPerIPWait and ConnMaxWaiting
	// bound how long and how many wait for their turn. See
	// connlimit.Config.
	ConnPerIPPerSec int
	ConnPerIPBurst  int
	ConnPerIPWait   time.Duration
	ConnMaxWaiting  int

	// DegradeToDB sells grabs from the database while the breaker says
	// Redis is down, so that a Redis outage slows the sale rather than
	// stopping it.
	DegradeToDB bool
	// ShedIPPerSec is the in-process per-IP request limit (Off = off);
	// ShedQueueDepth and ShedGrabLatency the grab load at which non-core
	// operations are shed (Off = off). See httpapi.LoadShedding.
	ShedIPPerSec    int
	ShedQueueDepth  int
	ShedGrabLatency time.Duration
	// AnonMaxInFlight, AnonPerSec and AnonWait are the budget of requests
	// without a valid token (Off = that bound off). See
	// httpapi.AnonymousBudget.
	AnonMaxInFlight int
	AnonPerSec      int
	AnonWait        time.Duration

	// TicketSecret keys grab tickets and challenges (empty = derived from
	// JWTSecret); TicketReleaseBefore, TicketTTL, ChallengeTTL,
	// PowDifficulty and GateRefresh are the grab gate's (see
	// usecase/gate).
	TicketSecret        string
	TicketReleaseBefore time.Duration
	TicketTTL           time.Duration
	ChallengeTTL        time.Duration
	PowDifficulty       int
	GateRefresh         time.Duration

	// Introspection says who may ask the schema on /query: off, token
	// (a valid token of any role) or public (graph.IntrospectionMode).
	Introspection string
	// PprofAddr, if set, serves Go's profiles on a listener of its own.
	PprofAddr string
	// CompiledGrabs answers known grab documents without gqlgen's
	// executor, with the same bytes (httpapi.compiledGrabs).
	CompiledGrabs bool
	Demo          bool // create a demo voucher and print tokens; default on in embedded mode

	// Traces are the OpenTelemetry traces' settings (see Tracing), under
	// the SDK's standard variable names.
	Traces Tracing
	// ActorMetrics exports protoactor's own OpenTelemetry metrics at
	// /metrics beside ours (ACTOR_METRICS).
	ActorMetrics bool
}

// Embedded reports the zero-configuration mode: neither Redis nor the
// database is configured, so both run in-process.
func (c Config) Embedded() bool { return c.RedisURL == "" && c.DatabaseURL == "" }

// CORSOrigins are the origins CORS_ALLOWED_ORIGINS allows, nil for
// "none".
func (c Config) CORSOrigins() []string {
	if len(c.CORSAllowedOrigins) == 1 && c.CORSAllowedOrigins[0] == "none" {
		return nil
	}
	return c.CORSAllowedOrigins
}

// Defaults the token command needs too, without loading a whole Config.
const (
	// HTTPAddrDefault is the contract's listen address, every interface.
	HTTPAddrDefault = ":8080"
	// EmbeddedHTTPAddrDefault is the embedded mode's: loopback only,
	// because that mode prints an admin token and puts it in the
	// playground page.
	EmbeddedHTTPAddrDefault = "127.0.0.1:8080"
	// SQLitePathDefault is the embedded database file.
	SQLitePathDefault = "flashsale.db"
)

// EmbeddedCORSOriginsDefault are the origins embedded mode allows
// (CORS_ALLOWED_ORIGINS): a frontend's dev server on this machine, on
// any port.
var EmbeddedCORSOriginsDefault = []string{"http://localhost:*", "http://127.0.0.1:*"}

// SecretPath is the file that keeps the embedded mode's JWT secret, beside
// its SQLite file (flashsale.db → flashsale.secret): the secret lives as
// long as the data, so tokens survive restarts and the token command can
// sign with it.
func SecretPath(sqlitePath string) string {
	return strings.TrimSuffix(sqlitePath, filepath.Ext(sqlitePath)) + ".secret"
}

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
// name), with what the packages it configures say of their settings
// (owners: their defaults, for the usage and the checks, and their rules).
// The usage goes to out when asked for (-h), and Load then returns
// flag.ErrHelp; any other flag error is returned as one line. The values
// are checked as the node will run with them, every unset setting at its
// default; a setting whose default owners lacks is checked only when set.
func Load(args []string, getenv func(string) string, out io.Writer, owners Owners) (Config, error) {
	all := owners.settings()
	fs := flag.NewFlagSet("flashsale", flag.ContinueOnError)
	// The flag package prints the whole usage after every parse error; a
	// mistyped flag should give one line naming it, so usage is printed
	// below, and only for -h.
	fs.SetOutput(io.Discard)
	// Defaults are static and the environment is applied after parsing:
	// a default taken from the environment would be printed by the usage
	// ("(default "...")"), and with it JWT_SECRET and database passwords.
	raw := make([]*flagText, len(all))
	defaults := map[string]string{} // by flag, for the usage
	for i, s := range all {
		raw[i] = &flagText{text: s.def, kind: s.kind}
		fs.Var(raw[i], s.flag(), s.help+" ("+s.env+")")
		defaults[s.flag()] = cmp.Or(s.def, owners.defaultOf(s))
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(out, Usage)
		printDefaults(out, fs, defaults)
		return Config{}, err
	} else if err != nil {
		return Config{}, fmt.Errorf("%w (see --help)", err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// c holds the values given; checked, the same with the packages'
	// defaults of the settings left unset, as the node runs with them.
	var c, checked Config
	var unset []setting
	unchecked := map[string]bool{}
	for i, s := range all {
		text := raw[i].text
		if v := strings.TrimSpace(getenv(s.env)); v != "" && !given[s.flag()] {
			text = v
		}
		if !s.keepSpace {
			text = strings.TrimSpace(text)
		}
		if err := s.parse(&c, text); err != nil {
			return Config{}, &Error{Var: s.env, Msg: err.Error()}
		}
		if text == "" {
			text = owners.defaultOf(s)
			unchecked[s.env] = text == "" && s.byPackage
		}
		if err := s.parse(&checked, text); err != nil {
			return Config{}, &Error{Var: s.env, Msg: "its package's default " + strconv.Quote(text) + ": " + err.Error()}
		}
		if text == "" && s.derive != nil {
			unset = append(unset, s)
		}
	}
	// Defaults that depend on other settings, once all are read.
	for _, s := range unset {
		s.derive(&c)
		s.derive(&checked)
	}
	return c, validate(all, checked, unchecked)
}

// Usage is the head of -h: every subcommand, then the service's flags.
const Usage = `Usage:
  flashsale [flags]                       run the service (no configuration: embedded mode)
  flashsale token --user ID [--role admin] [--ttl D]
                                          print a bearer token (flashsale token -h)
  flashsale solve CHALLENGE [difficulty]  print a nonce for a seckillChallenge (flashsale solve -h)
  flashsale --version                     print the module version and VCS revision, and exit

Flags of the service (each can also be set by the variable in brackets; a flag wins):
`

// flagText is a setting's flag: it keeps the text given, which Load
// parses after the environment is applied (a flag wins over its
// variable), and knows the setting's kind, so that -h names the type as
// the flag package does for its typed flags and a boolean flag given
// alone (--demo) means true.
type flagText struct {
	text string
	kind string // string, int, duration or bool
}

func (f *flagText) String() string {
	if f == nil {
		return ""
	}
	return f.text
}

func (f *flagText) Set(s string) error { f.text = s; return nil }

// IsBoolFlag is how the flag package knows a flag needs no value.
func (f *flagText) IsBoolFlag() bool { return f.kind == "bool" }

// printDefaults prints the flags as flag.PrintDefaults prints typed ones
// (a flag.Value of our own would be typed "value"): the type after the
// name, none for a boolean, and the default (by flag) unless it is the
// zero value.
func printDefaults(w io.Writer, fs *flag.FlagSet, defaults map[string]string) {
	fs.VisitAll(func(f *flag.Flag) {
		def := defaults[f.Name]
		kind := f.Value.(*flagText).kind
		var b strings.Builder
		b.WriteString("  -" + f.Name)
		if kind != "bool" {
			b.WriteString(" " + kind)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(f.Usage, "\n", "\n    \t"))
		switch zero := map[string]string{"string": "", "int": "0", "duration": "0s", "bool": "false"}[kind]; {
		case def == "" || def == zero:
		case kind == "string":
			fmt.Fprintf(&b, " (default %q)", def)
		default:
			fmt.Fprintf(&b, " (default %s)", def)
		}
		fmt.Fprintln(w, b.String())
	})
}

// validate checks every setting of all in c, in the table's order, but
// those unchecked, and returns the first problem.
func validate(all []setting, c Config, unchecked map[string]bool) error {
	for _, s := range all {
		if s.check == nil || unchecked[s.env] {
			continue
		}
		if msg := s.check(c); msg != "" {
			return &Error{Var: s.env, Msg: msg}
		}
	}
	return nil
}

// Level is the slog level named by LogLevel.
func (c Config) Level() (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(c.LogLevel))
	return l, err
}

// LogValue logs every setting of the table, under its variable's name in
// lower case, with secrets masked: the JWT secret whole, and any password
// inside a URL, as its user's or as a query parameter.
func (c Config) LogValue() slog.Value {
	attrs := make([]slog.Attr, len(settings))
	for i, s := range settings {
		attrs[i] = slog.Attr{Key: s.logKey(), Value: s.show(c)}
	}
	return slog.GroupValue(attrs...)
}

func orEmbedded(s string) string {
	if s == "" {
		return "(embedded)"
	}
	return s
}

// RedactURL hides the passwords of a URL, for logs and errors: the
// user's, and any query parameter named like a password (Postgres reads
// ?password= and ?sslpassword=). Pairs are rewritten in place, which
// keeps their order; url.Values would sort them.
func RedactURL(s string) string {
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
