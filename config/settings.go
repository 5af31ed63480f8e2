package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"flashsale/domain"
)

// setting is one configuration variable, declared once: its variable (the
// flag is the same name in kebab case), default, help, how its text is
// parsed into Config, what is checked once all are read, and how it is
// shown in the start-up log. Load, LogValue, Effective and the usage (-h)
// all walk the table below, so a setting cannot be read but not logged.
// What only the package a setting configures knows (its default, the
// rules of its values) comes from Owners.
type setting struct {
	env  string // REDIS_URL
	def  string // as the text a flag or variable would give; "" = unset
	help string
	// byPackage: the default is the package's (see owned).
	byPackage bool
	// kind is the type -h shows: string, int, duration or bool.
	kind string
	// secret values are shown masked whole and never have a default: the
	// usage prints defaults.
	secret bool
	// keepSpace keeps a flag's surrounding spaces (a secret is taken as
	// given); variables are always trimmed.
	keepSpace bool

	// parse sets the field from the text (the default when neither the
	// flag nor the variable is given); its error is the message after
	// "invalid VAR: ".
	parse func(c *Config, s string) error
	// derive, if set, gives the default of a setting left empty, from
	// other settings; it runs after every setting is parsed.
	derive func(c *Config)
	// check, if set, says what is wrong with the loaded value, or "".
	check func(c Config) string
	// show is the value for the start-up log; it masks what may hold a
	// secret.
	show func(c Config) slog.Value
	// zero reports whether the setting holds its zero value.
	zero func(c Config) bool
}

func (s setting) flag() string   { return flagName(s.env) }
func (s setting) logKey() string { return strings.ToLower(s.env) }

func (s setting) derived(f func(c *Config)) setting       { s.derive = f; return s }
func (s setting) checked(f func(c Config) string) setting { s.check = f; return s }
func (s setting) shown(f func(c Config) slog.Value) setting {
	s.show = f
	return s
}

// owned marks a setting whose default the package it configures owns:
// unset, it holds its zero value, which that package takes as its default
// (cmp.Or where the option is used). Owners gives that default as text,
// for the usage, the start-up log, the reference and the checks.
func (s setting) owned() setting {
	parse := s.parse
	s.def, s.byPackage = "", true
	s.parse = func(c *Config, t string) error {
		if t == "" {
			return nil
		}
		return parse(c, t)
	}
	return s
}

// settings is the whole configuration, in the order of the start-up log.
var settings = append([]setting{
	// Embedded mode prints an admin token and puts one in the playground
	// page, so it listens on the loopback interface unless told otherwise.
	stringVar("HTTP_ADDR", "", "listen address; default "+HTTPAddrDefault+", "+EmbeddedHTTPAddrDefault+" when embedded", func(c *Config) *string { return &c.HTTPAddr }).
		derived(func(c *Config) {
			c.HTTPAddr = HTTPAddrDefault
			if c.Embedded() {
				c.HTTPAddr = EmbeddedHTTPAddrDefault
			}
		}).
		checked(func(c Config) string {
			if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
				return "want host:port, e.g. :8080"
			}
			return ""
		}),
	stringVar("NODE_ID", "", "this node's stable identity; default host name and HTTP_ADDR", func(c *Config) *string { return &c.NodeID }).
		derived(func(c *Config) {
			host, err := hostname()
			if err != nil || host == "" {
				host = "node"
			}
			c.NodeID = DefaultNodeID(host, c.HTTPAddr)
		}).
		checked(func(c Config) string { return nodeIDProblem(c.NodeID) }),
	lowerVar("REDIS_MODE", "", "how REDIS_URL reaches Redis: single (redis://host:port/db), sentinel (go-redis's failover URL, redis://sentinel:26379?master_name=NAME&addr=sentinel2:26379) or cluster (go-redis's cluster URL, redis://node1:7000?addr=node2:7001: any nodes, the rest is discovered; each voucher's and red packet's keys live on one shard)", func(c *Config) *string { return &c.RedisMode }).
		owned(),
	stringVar("REDIS_URL", "", "stock Redis URL in REDIS_MODE's form; empty runs an in-process Redis", func(c *Config) *string { return &c.RedisURL }).
		checked(func(c Config) string {
			if c.RedisURL == "" && c.DatabaseURL != "" && !c.AllowEmbeddedRedis {
				return "required when DATABASE_URL is set: an in-process Redis dies with the process, losing the orders " +
					"answered OK on their way to the database, and every node would sell the whole stock from its own; " +
					"set REDIS_URL to a Redis run with appendonly yes and appendfsync always " +
					"(or ALLOW_EMBEDDED_REDIS=true to run on the in-process Redis anyway)"
			}
			return ""
		}).
		shown(func(c Config) slog.Value { return slog.StringValue(orEmbedded(RedactURL(c.RedisURL))) }),
	boolVar("ALLOW_EMBEDDED_REDIS", "false", "with DATABASE_URL set and no REDIS_URL, run on an in-process Redis anyway (refused otherwise): a crash loses orders answered OK and nodes sharing the database oversell; for trying, never for a sale", func(c *Config) *bool { return &c.AllowEmbeddedRedis }),
	listVar("LOCK_REDIS_URLS", "comma-separated Redlock nodes, each one server; default REDIS_URL (in REDIS_MODE)", func(c *Config) *[]string { return &c.LockRedisURLs }).
		derived(func(c *Config) {
			if c.RedisURL != "" {
				c.LockRedisURLs = []string{c.RedisURL}
			}
		}).
		checked(func(c Config) string {
			if n := len(c.LockRedisURLs); n > 0 && n%2 == 0 {
				return fmt.Sprintf("Redlock needs an odd number of independent nodes (1, 3 or 5), got %d", n)
			}
			return ""
		}),
	intVar("REDIS_ACK_REPLICAS", "0", "a grab batch's answers wait until this many replicas hold its writes (WAIT); 0 = the primary alone", func(c *Config) *int { return &c.RedisAckReplicas }, replicas).
		checked(func(c Config) string {
			if c.RedisAckReplicas > 0 && c.RedisURL == "" {
				return "needs REDIS_URL: the in-process Redis has no replicas"
			}
			return ""
		}),
	boolVar("REDIS_ACK_AOF", "false", "with REDIS_ACK_REPLICAS, a batch's answers also wait until the primary's and that many replicas' append-only files have fsynced its writes (WAITAOF), where the primary has it (Redis 7.2 or later, appendonly yes; WAIT elsewhere, learned at start and every 10s); the replicas need appendfsync always, or batches wait out REDIS_ACK_TIMEOUT", func(c *Config) *bool { return &c.RedisAckAOF }).
		checked(func(c Config) string {
			if c.RedisAckAOF && c.RedisAckReplicas == 0 {
				return "needs REDIS_ACK_REPLICAS"
			}
			return ""
		}),
	// Checked by its package's rule alone: it means nothing without
	// acknowledgements to wait for.
	ownedDuration("REDIS_ACK_TIMEOUT", "how long a grab batch waits for REDIS_ACK_REPLICAS; past it the batch answers UNAVAILABLE (undecided, settled by request id)", func(c *Config) *time.Duration { return &c.RedisAckTimeout }).
		checked(nil),
	stringVar("DATABASE_URL", "", "Postgres URL; empty uses the embedded SQLite file", func(c *Config) *string { return &c.DatabaseURL }).
		checked(func(c Config) string {
			if c.DatabaseURL == "" {
				return ""
			}
			u, err := url.Parse(c.DatabaseURL)
			if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
				return "want postgres://user@host:port/db"
			}
			return ""
		}).
		shown(func(c Config) slog.Value { return slog.StringValue(orEmbedded(RedactURL(c.DatabaseURL))) }),
	ownedInt("DATABASE_MAX_CONNS", "connections a node opens to Postgres at most (a quarter of them, at least 2, stay open while idle); every node's together must stay under the server's max_connections", func(c *Config) *int { return &c.DatabaseMaxConns }, positive),
	stringVar("SQLITE_PATH", SQLitePathDefault, "embedded SQLite database file; the embedded JWT secret is kept beside it (.secret)", func(c *Config) *string { return &c.SQLitePath }),
	secretVar("JWT_SECRET", "HS256 secret; required unless embedded (then kept in the file beside SQLITE_PATH)", func(c *Config) *string { return &c.JWTSecret }).
		checked(func(c Config) string {
			if !c.Embedded() && c.JWTSecret == "" {
				return "required when REDIS_URL or DATABASE_URL is set"
			}
			return ""
		}),
	// The leeway is internal/auth's (auth.Leeway), which the owners' test
	// holds this help to.
	ownedDuration("JWT_MAX_TTL", "longest token lifetime accepted (exp - iat) and minted by the token command; a token is accepted until 5s past its exp (clock leeway)", func(c *Config) *time.Duration { return &c.JWTMaxTTL }),
	ownedDuration("PAY_TIMEOUT", "unpaid orders are cancelled after this", func(c *Config) *time.Duration { return &c.PayTimeout }),
	ownedDuration("PAY_TIMEOUT_INTERVAL", "how often one node looks for unpaid orders past PAY_TIMEOUT", func(c *Config) *time.Duration { return &c.PayTimeoutInterval }),
	ownedDuration("RECONCILE_INTERVAL", "how often one node reconciles every seckill voucher (drift metric and log)", func(c *Config) *time.Duration { return &c.ReconcileInterval }),
	ownedDuration("STATUS_SYNC_INTERVAL", "how often every node re-applies to Redis the status of vouchers whose change Redis missed: a voucher paused in the database is sold by Redis at most about this long", func(c *Config) *time.Duration { return &c.StatusSyncInterval }).
		checked(func(c Config) string {
			if c.StatusSyncInterval <= 0 || c.StatusSyncInterval > time.Minute {
				return "want more than 0, at most 1m"
			}
			return ""
		}),
	ownedDuration("RED_PACKET_REFUND_INTERVAL", "how often one node refunds expired red packets", func(c *Config) *time.Duration { return &c.RedPacketRefundInterval }),
	ownedDuration("RED_PACKET_REFUND_GRACE", "how long after its expiry a red packet is refunded (room for clock skew)", func(c *Config) *time.Duration { return &c.RedPacketRefundGrace }),
	ownedInt("RED_PACKET_MAX_OPEN_PER_USER", "open red packets (neither refunded nor fully grabbed) one user may have at once; one more is RATE_LIMITED", func(c *Config) *int { return &c.RedPacketMaxOpenPerUser }, positive),
	ownedInt("RED_PACKET_MAX_PER_USER_PER_DAY", "red packets one user may create within any 24 hours (a rolling day); one more is RATE_LIMITED, retryAfterMs until the oldest of them is 24 hours old", func(c *Config) *int { return &c.RedPacketMaxPerUserPerDay }, positive),
	ownedDuration("RED_PACKET_RETENTION", "how long a settled red packet (refunded: expired, and no grab of it can still arrive) stays in the database after its refund; then one node deletes it with its packets and grabs; at least 24h, the window of RED_PACKET_MAX_PER_USER_PER_DAY (set a large value to keep them longer)", func(c *Config) *time.Duration { return &c.RedPacketRetention }).
		checked(func(c Config) string {
			if c.RedPacketRetention < domain.RedPacketDay {
				return "want 24h or more: RED_PACKET_MAX_PER_USER_PER_DAY counts the red packets created within the last 24h"
			}
			return ""
		}),

	stringVar("CLUSTER_PROVIDER", "test", "test, automanaged or etcd", func(c *Config) *string { return &c.ClusterProvider }).
		checked(func(c Config) string {
			switch c.ClusterProvider {
			case "test", "automanaged", "etcd":
				return ""
			}
			return "want test, automanaged or etcd"
		}),
	stringVar("CLUSTER_NAME", "flashsale", "cluster name", func(c *Config) *string { return &c.ClusterName }).
		checked(func(c Config) string {
			if c.ClusterName == "" {
				return "must not be empty"
			}
			return ""
		}),
	stringVar("CLUSTER_HOST", "127.0.0.1", "actor remoting host", func(c *Config) *string { return &c.ClusterHost }),
	intVar("CLUSTER_PORT", "0", "actor remoting port (0 = any)", func(c *Config) *int { return &c.ClusterPort }, portNumber(true)),
	listVar("CLUSTER_SEEDS", "automanaged: host:port of every member", func(c *Config) *[]string { return &c.ClusterSeeds }).
		checked(func(c Config) string {
			if c.ClusterProvider != "automanaged" {
				return ""
			}
			if len(c.ClusterSeeds) == 0 {
				return "required with CLUSTER_PROVIDER=automanaged"
			}
			for _, s := range c.ClusterSeeds {
				if _, _, err := net.SplitHostPort(s); err != nil {
					return fmt.Sprintf("%q is not host:port", s)
				}
			}
			return ""
		}),
	intVar("CLUSTER_AUTOMANAGED_PORT", "", "automanaged: this member's port", func(c *Config) *int { return &c.ClusterAutomanagedPort }, optional(portNumber(false))).
		checked(func(c Config) string {
			if c.ClusterProvider == "automanaged" && c.ClusterAutomanagedPort == 0 {
				return "required with CLUSTER_PROVIDER=automanaged"
			}
			return ""
		}),
	durationVar("SEGMENT_LEASE_TTL", 3*time.Second, "Redlock lease of a voucher segment's activation (renewed at a third of it); a dead member's segments wait at most this long", func(c *Config) *time.Duration { return &c.SegmentLeaseTTL }).
		checked(func(c Config) string {
			if c.SegmentLeaseTTL < 300*time.Millisecond || c.SegmentLeaseTTL > time.Minute {
				return "want 300ms .. 1m"
			}
			return ""
		}),
	listVar("ETCD_ENDPOINTS", "etcd: comma-separated endpoints", func(c *Config) *[]string { return &c.EtcdEndpoints }).
		checked(func(c Config) string {
			if c.ClusterProvider == "etcd" && len(c.EtcdEndpoints) == 0 {
				return "required with CLUSTER_PROVIDER=etcd"
			}
			return ""
		}),

	intVar("RATE_USER_PER_SEC", "10", "grabs per second per user (0 = off)", func(c *Config) *int { return &c.RateUserPerSec }, rate),
	intVar("RATE_VOUCHER_PER_SEC", "0", "grabs per second per voucher (0 = off)", func(c *Config) *int { return &c.RateVoucherPerSec }, rate),
	intVar("RATE_IP_PER_SEC", "0", "requests per second per client address (an IPv6 /64), shared by every node through Redis (0 = off)", func(c *Config) *int { return &c.RateIPPerSec }, rate),

	lowerVar("LOG_LEVEL", "info", "debug, info, warn or error", func(c *Config) *string { return &c.LogLevel }).
		checked(func(c Config) string {
			if _, err := c.Level(); err != nil {
				return "want debug, info, warn or error"
			}
			return ""
		}),
	lowerVar("LOG_FORMAT", "", "text or json; default text embedded, json otherwise", func(c *Config) *string { return &c.LogFormat }).
		derived(func(c *Config) {
			c.LogFormat = "json"
			if c.Embedded() {
				c.LogFormat = "text"
			}
		}).
		checked(func(c Config) string {
			if c.LogFormat != "text" && c.LogFormat != "json" {
				return "want text or json"
			}
			return ""
		}),

	ownedDuration("ORDER_LOG_CLAIM_IDLE", "take over order-log entries pending this long with a dead node", func(c *Config) *time.Duration { return &c.OrderLogClaimIdle }),
	offDuration("ORDER_LOG_LINGER", "after a batch that did not fill, the log writers wait this long before reading the next, so a steady trickle of orders is stored in fewer transactions (0 = no wait)", func(c *Config) *time.Duration { return &c.OrderLogLinger }, "want 0 to 1s").
		checked(func(c Config) string {
			if c.OrderLogLinger > time.Second {
				return "want 0 to 1s"
			}
			return ""
		}),
	ownedInt("GRAB_BATCH_SIZE", "grabs per script call, at most", func(c *Config) *int { return &c.GrabBatchSize }, positive),
	ownedInt("GRAB_QUEUE_BOUND", "grabs waiting per voucher before shedding", func(c *Config) *int { return &c.GrabQueueBound }, positive),
	ownedDuration("GRAB_TIMEOUT", "a grab's wait for its answer; shutdown waits as long for queued grabs", func(c *Config) *time.Duration { return &c.GrabTimeout }),
	durationVar("ORDER_LOG_DRAIN_TIMEOUT", 5*time.Second, "shutdown waits this long for accepted orders to reach the database", func(c *Config) *time.Duration { return &c.OrderLogDrainTimeout }),
	durationVar("HTTP_SHUTDOWN_TIMEOUT", 10*time.Second, "shutdown waits this long for open HTTP requests", func(c *Config) *time.Duration { return &c.HTTPShutdownTimeout }),
	durationVar("HTTP_DRAIN_DELAY", 0, "at shutdown, serve this long with /readyz at 503 before closing the listener (0 = at once)", func(c *Config) *time.Duration { return &c.HTTPDrainDelay }).
		checked(func(c Config) string {
			if c.HTTPDrainDelay < 0 {
				return "must not be negative"
			}
			return ""
		}),
	ownedDuration("HTTP_HEADER_TIMEOUT", "a request's headers must arrive within this", func(c *Config) *time.Duration { return &c.HTTPHeaderTimeout }),
	ownedDuration("HTTP_BODY_TIMEOUT", "a request's body must arrive within this after its headers", func(c *Config) *time.Duration { return &c.HTTPBodyTimeout }),
	ownedDuration("HTTP_WRITE_TIMEOUT", "an answer must be taken by the client within this after the request's headers (not websockets)", func(c *Config) *time.Duration { return &c.HTTPWriteTimeout }).
		checked(func(c Config) string {
			if c.HTTPWriteTimeout <= 0 {
				return "must be positive"
			}
			if c.HTTPWriteTimeout <= c.GrabTimeout {
				return "must be longer than GRAB_TIMEOUT (" + FormatDuration(c.GrabTimeout) + "): a grab's answer needs time to be written"
			}
			return ""
		}),

	// New connections per client address, decided in the listener before
	// net/http reads anything: what net/http refuses itself (431) and
	// websocket refusals cost a flooding client only a new connection.
	offInt("CONN_PER_IP_PER_SEC", "new TCP connections per second one client address (an IPv6 /64) gets read; more wait unread for their turn (CONN_PER_IP_WAIT) or are closed; 0 = off (set 0 behind a proxy or load balancer: every client then has its address)", func(c *Config) *int { return &c.ConnPerIPPerSec }),
	ownedInt("CONN_PER_IP_BURST", "new connections one client address may open at once after a quiet spell (CONN_PER_IP_PER_SEC)", func(c *Config) *int { return &c.ConnPerIPBurst }, positive),
	offDuration("CONN_PER_IP_WAIT", "longest a connection over its address's rate waits, unread, for its turn; one whose turn is later is closed at once (0 = no wait)", func(c *Config) *time.Duration { return &c.ConnPerIPWait }, "must not be negative"),
	offInt("CONN_MAX_WAITING", "connections waiting for their turn at once, every address together; one more over its rate is closed at once (0 = none wait)", func(c *Config) *int { return &c.ConnMaxWaiting }),
	offInt("SHED_IP_PER_SEC", "in-process limit of requests (and websocket operations) per second per client address (an IPv6 /64) on this node, burst two seconds' worth, checked before anything is parsed, no Redis; over it: 429 RATE_LIMITED; 0 = off (set 0 behind a proxy or load balancer: every client then has its address)", func(c *Config) *int { return &c.ShedIPPerSec }),
	offInt("SHED_QUEUE_DEPTH", "grabs waiting on this node at which non-core operations are shed (0 = off)", func(c *Config) *int { return &c.ShedQueueDepth }),
	offDuration("SHED_GRAB_LATENCY", "recent average grab latency at which non-core operations are shed (0 = off)", func(c *Config) *time.Duration { return &c.ShedGrabLatency }, "must not be negative"),
	// The anonymous budget scales with the cores the node schedules on:
	// what it bounds is a share of their time. The numbers per core are
	// httpapi's, which the owners' test holds these helps to.
	offInt("ANON_MAX_IN_FLIGHT", "requests without a valid token running at once on this node; one more waits for its turn (ANON_WAIT), then 429 RATE_LIMITED; default 1 per core (GOMAXPROCS) (0 = no bound)", func(c *Config) *int { return &c.AnonMaxInFlight }),
	offInt("ANON_PER_SEC", "requests without a valid token started per second on this node, a body taking one start per 8 KiB; more wait for their turn (ANON_WAIT), then 429 RATE_LIMITED; default 100 per core (GOMAXPROCS) (0 = no bound)", func(c *Config) *int { return &c.AnonPerSec }),
	offDuration("ANON_WAIT", "how long a request without a valid token waits for the anonymous budget (ANON_MAX_IN_FLIGHT, ANON_PER_SEC) before it is answered 429 (0 = not at all)", func(c *Config) *time.Duration { return &c.AnonWait }, "must not be negative"),
	ownedInt("MAX_RESPONSE_BYTES", "largest GraphQL answer in bytes; a larger one is refused with an error", func(c *Config) *int { return &c.MaxResponseBytes }, positive),
	ownedInt("MAX_REQUEST_COST", "largest cost of one GraphQL request, in points (a field 1, a list its page size times an item and 10 for its row, a text 1 more per 128 bytes of the longest stored), known before it runs; a costlier one is refused with BAD_USER_INPUT (COMPLEXITY_LIMIT_EXCEEDED)", func(c *Config) *int { return &c.MaxRequestCost }, positive),
	offInt("COST_BUDGET", "each caller's budget of request cost in points, per user and per address (IPv6: its /64) without a token, shared by every node; a request it cannot pay is refused with RATE_LIMITED and retryAfterMs; grabs are never charged (0 = no budget)", func(c *Config) *int { return &c.CostBudget }).
		checked(func(c Config) string {
			if c.CostBudget > 0 && c.CostBudget < c.MaxRequestCost {
				return "must be 0 or at least MAX_REQUEST_COST: a budget smaller than one request refuses that request for ever"
			}
			return ""
		}),
	ownedInt("COST_RESTORE_PER_SEC", "points each caller's budget (COST_BUDGET) gets back a second", func(c *Config) *int { return &c.CostRestorePerSec }, positive),
	ownedInt("WS_MAX_OPERATIONS", "operations running at once on one websocket; one more gets an error", func(c *Config) *int { return &c.WSMaxOperations }, positive),
	ownedInt("WS_MAX_PER_USER", "websockets one user holds open at once on this node; one more is closed with 4429", func(c *Config) *int { return &c.WSMaxPerUser }, positive),
	ownedInt("WS_MAX_PER_IP", "websockets open at once from one client address (an IPv6 /64) on this node, tokens or not; one more is closed with 4429", func(c *Config) *int { return &c.WSMaxPerIP }, positive),
	ownedInt("WS_SUBSCRIBES_PER_SEC", "operations (subscribe messages) one websocket may start per second, after a burst of WS_MAX_OPERATIONS or a second's worth, the larger; one more gets RATE_LIMITED with retryAfterMs, and a socket that sends as many again without waiting is closed with 4429", func(c *Config) *int { return &c.WSSubscribesPerSec }, positive),
	ownedInt("WS_MAX_UNINITIALIZED", "websockets on this node accepted but not yet sent connection_init, every address together; one more handshake is answered 503 with Retry-After before the upgrade", func(c *Config) *int { return &c.WSMaxUninitialized }, positive),
	// A page on another origin (a frontend's dev server, the shop's site)
	// may call /query only if its origin is listed; embedded mode, which
	// listens on the loopback interface, lets local dev servers in.
	listVar("CORS_ALLOWED_ORIGINS", "origins whose pages may call /query and open its websocket: comma-separated scheme://host[:port], one * each for any run of characters (http://localhost:*), or * for any origin (no credentials are ever allowed); none = only the service's own origin; default none, "+strings.Join(EmbeddedCORSOriginsDefault, ",")+" when embedded", func(c *Config) *[]string { return &c.CORSAllowedOrigins }).
		derived(func(c *Config) {
			if c.Embedded() {
				c.CORSAllowedOrigins = EmbeddedCORSOriginsDefault
			}
		}).
		// Origins hold no secret, and a pattern's * is no URL port.
		shown(func(c Config) slog.Value {
			if len(c.CORSOrigins()) == 0 {
				return slog.StringValue("none")
			}
			return slog.StringValue(strings.Join(c.CORSAllowedOrigins, ","))
		}),
	// Embedded mode's playground page holds an admin token: a page on a
	// name rebound to this machine must get nothing from it.
	listVar("EMBEDDED_ALLOWED_HOSTS", "embedded mode answers only requests whose Host is localhost, a loopback address (127.0.0.1, [::1]) or one of these comma-separated names or addresses (port ignored); any other gets 421 and nothing else, so a page on a name rebound to this machine (DNS rebinding) gets no token; ignored in real mode", func(c *Config) *[]string { return &c.EmbeddedAllowedHosts }),
	ownedInt("HTTP_MAX_HEADER_BYTES", "largest request line plus headers in bytes (net/http reads up to 4 KiB past it); more is answered 431", func(c *Config) *int { return &c.HTTPMaxHeaderBytes }, positive).
		checked(func(c Config) string {
			if c.HTTPMaxHeaderBytes > 1<<20 {
				return "want at most 1048576"
			}
			return ""
		}),
	boolVar("DEGRADE_TO_DB", "false", "while Redis is down (circuit breaker open), sell grabs from the database, one transaction each, at bounded concurrency; Redis is re-synced from the database when it returns", func(c *Config) *bool { return &c.DegradeToDB }),
	secretVar("TICKET_SECRET", "key of grab tickets and proof-of-work challenges, the same on every node; default derived from JWT_SECRET", func(c *Config) *string { return &c.TicketSecret }),
	ownedDuration("TICKET_RELEASE_BEFORE", "grab tickets (and challenges) are issued from this long before a sale begins until it ends", func(c *Config) *time.Duration { return &c.TicketReleaseBefore }).
		checked(nonNegative(func(c Config) time.Duration { return c.TicketReleaseBefore })),
	ownedDuration("TICKET_TTL", "a grab ticket's lifetime", func(c *Config) *time.Duration { return &c.TicketTTL }).
		checked(positiveDuration(func(c Config) time.Duration { return c.TicketTTL })),
	ownedDuration("CHALLENGE_TTL", "a proof-of-work challenge's lifetime", func(c *Config) *time.Duration { return &c.ChallengeTTL }).
		checked(positiveDuration(func(c Config) time.Duration { return c.ChallengeTTL })),
	ownedInt("POW_DIFFICULTY", "leading zero bits of SHA-256(challenge+nonce) a proof of work needs (1-32; 16 takes a browser ~50-200 ms)", func(c *Config) *int { return &c.PowDifficulty }, positive),
	ownedDuration("GATE_REFRESH", "how often every node re-reads the blocklist and the cached vouchers' gates, besides pub/sub announcements", func(c *Config) *time.Duration { return &c.GateRefresh }).
		checked(positiveDuration(func(c Config) time.Duration { return c.GateRefresh })),
	// Real stores mean a deployment that strangers can reach: there the
	// schema is answered to token holders only, unless the operator opens
	// it; the embedded mode's playground needs it before a token is pasted.
	// Its words are graph's (graph.ParseIntrospectionMode reads them).
	lowerVar("INTROSPECTION", "", "who may ask the schema (__schema, __type): off, token (a valid token of any role) or public; default public when embedded, token otherwise (true = public, false = off)", func(c *Config) *string { return &c.Introspection }).
		derived(func(c *Config) {
			c.Introspection = "token"
			if c.Embedded() {
				c.Introspection = "public"
			}
		}),
	stringVar("PPROF_ADDR", "", "serve Go's profiles (/debug/pprof/) on this address, a listener of its own; keep it private (empty = off)", func(c *Config) *string { return &c.PprofAddr }),
	boolVar("GRAPHQL_COMPILED_GRABS", "true", "answer plain seckillVoucher documents on the compiled path (the same answers as gqlgen's, a fraction of the CPU)", func(c *Config) *bool { return &c.CompiledGrabs }),
	boolVar("DEMO", "", "create a demo voucher and print tokens; default on when embedded", func(c *Config) *bool { return &c.Demo }).
		derived(func(c *Config) { c.Demo = c.Embedded() }),
	// The traces' settings (tracing.go) go last: the SDK's names, read
	// apart from the service's own.
}, tracingSettings()...)

// stringVar is a setting kept as text.
func stringVar(env, def, help string, field func(*Config) *string) setting {
	return setting{env: env, def: def, help: help, kind: "string",
		parse: func(c *Config, s string) error { *field(c) = s; return nil },
		show:  func(c Config) slog.Value { return slog.StringValue(*field(&c)) },
		zero:  func(c Config) bool { return *field(&c) == "" },
	}
}

// lowerVar is text compared without case (LOG_LEVEL=INFO).
func lowerVar(env, def, help string, field func(*Config) *string) setting {
	s := stringVar(env, def, help, field)
	s.parse = func(c *Config, s string) error { *field(c) = strings.ToLower(s); return nil }
	return s
}

// secretVar is text never shown: the log says only whether it is set.
func secretVar(env, help string, field func(*Config) *string) setting {
	s := stringVar(env, "", help, field)
	s.secret, s.keepSpace = true, true
	s.show = func(c Config) slog.Value {
		if *field(&c) == "" {
			return slog.StringValue("(unset)")
		}
		return slog.StringValue("***")
	}
	return s
}

// listVar is a comma-separated list, empty by default. Items that are
// URLs are logged without their passwords.
func listVar(env, help string, field func(*Config) *[]string) setting {
	return setting{env: env, help: help, kind: "string",
		parse: func(c *Config, s string) error { *field(c) = list(s); return nil },
		show: func(c Config) slog.Value {
			items := *field(&c)
			out := make([]string, len(items))
			for i, it := range items {
				out[i] = it
				if strings.Contains(it, "://") {
					out[i] = RedactURL(it)
				}
			}
			return slog.StringValue(strings.Join(out, ","))
		},
		zero: func(c Config) bool { return len(*field(&c)) == 0 },
	}
}

// durationVar is a positive duration, logged as text (30m, not 30m0s or
// nanoseconds in JSON).
func durationVar(env string, def time.Duration, help string, field func(*Config) *time.Duration) setting {
	return setting{env: env, def: FormatDuration(def), help: help, kind: "duration",
		parse: func(c *Config, s string) error {
			d, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("want a duration such as 30m or 90s")
			}
			*field(c) = d
			return nil
		},
		check: func(c Config) string {
			if *field(&c) <= 0 {
				return "must be positive"
			}
			return ""
		},
		show: func(c Config) slog.Value { return slog.StringValue(FormatDuration(*field(&c))) },
		zero: func(c Config) bool { return *field(&c) == 0 },
	}
}

// intVar is a whole number read by conv, which says what it accepts.
func intVar(env, def, help string, field func(*Config) *int, conv func(string) (int, error)) setting {
	return setting{env: env, def: def, help: help, kind: "int",
		parse: func(c *Config, s string) error {
			n, err := conv(s)
			if err != nil {
				return err
			}
			*field(c) = n
			return nil
		},
		show: func(c Config) slog.Value { return slog.IntValue(*field(&c)) },
		zero: func(c Config) bool { return *field(&c) == 0 },
	}
}

// ownedDuration and ownedInt are settings whose default their package
// owns (see owned).
func ownedDuration(env, help string, field func(*Config) *time.Duration) setting {
	return durationVar(env, 0, help, field).owned()
}

func ownedInt(env, help string, field func(*Config) *int, conv func(string) (int, error)) setting {
	return intVar(env, "", help, field, conv).owned()
}

// Off is what a setting whose 0 means off (no bound, no wait) holds when
// set to 0, since its zero value means its package's default: the
// packages take a negative value as off. The start-up log shows it as 0.
const Off = -1

// offInt is a whole number >= 0 whose default its package owns and whose
// 0 means off, held as Off.
func offInt(env, help string, field func(*Config) *int) setting {
	s := ownedInt(env, help, field, rate)
	parse := s.parse
	s.parse = func(c *Config, t string) error {
		if err := parse(c, t); err != nil {
			return err
		}
		if t != "" && *field(c) == 0 {
			*field(c) = Off
		}
		return nil
	}
	s.show = func(c Config) slog.Value { return slog.IntValue(max(*field(&c), 0)) }
	return s
}

// offDuration is a duration whose default its package owns and whose 0
// means off (no wait), held as Off; a negative one is refused with
// negative when it is read, since Off is negative.
func offDuration(env, help string, field func(*Config) *time.Duration, negative string) setting {
	s := ownedDuration(env, help, field)
	parse := s.parse
	s.parse = func(c *Config, t string) error {
		if err := parse(c, t); err != nil {
			return err
		}
		switch d := field(c); {
		case t == "":
		case *d < 0:
			return errors.New(negative)
		case *d == 0:
			*d = Off
		}
		return nil
	}
	s.check = nil // 0 is allowed
	s.show = func(c Config) slog.Value { return slog.StringValue(FormatDuration(max(*field(&c), 0))) }
	return s
}

// boolVar is true or false (strconv.ParseBool). Empty is accepted only
// where the default is empty, for derive to decide.
func boolVar(env, def, help string, field func(*Config) *bool) setting {
	return setting{env: env, def: def, help: help, kind: "bool",
		parse: func(c *Config, s string) error {
			if s == "" && def == "" {
				return nil
			}
			b, err := strconv.ParseBool(s)
			if err != nil {
				return fmt.Errorf("want true or false")
			}
			*field(c) = b
			return nil
		},
		show: func(c Config) slog.Value { return slog.BoolValue(*field(&c)) },
		zero: func(c Config) bool { return !*field(&c) },
	}
}

// FormatDuration is a duration as settings show it: without the zero
// units time.Duration.String keeps (30m, 1h, 1h30m, 90s as 1m30s).
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func portNumber(zeroOK bool) func(string) (int, error) {
	return func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 65535 || (n == 0 && !zeroOK) {
			return 0, fmt.Errorf("want a port number")
		}
		return n, nil
	}
}

// optional lets an empty text mean 0 (unset).
func optional(conv func(string) (int, error)) func(string) (int, error) {
	return func(s string) (int, error) {
		if s == "" {
			return 0, nil
		}
		return conv(s)
	}
}

// replicas is a count of replicas, 0 for none.
func replicas(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a whole number >= 0 (0 = the primary alone)")
	}
	return n, nil
}

func rate(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a whole number >= 0 (0 = off)")
	}
	return n, nil
}

func positive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("want a whole number >= 1")
	}
	return n, nil
}

func nonNegative(d func(Config) time.Duration) func(Config) string {
	return func(c Config) string {
		if d(c) < 0 {
			return "must not be negative"
		}
		return ""
	}
}

func positiveDuration(d func(Config) time.Duration) func(Config) string {
	return func(c Config) string {
		if d(c) <= 0 {
			return "must be positive"
		}
		return ""
	}
}
