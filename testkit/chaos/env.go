package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver for the checks' own connection
	"github.com/redis/go-redis/v9"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// nodeCount is how many service processes share the stores: two, so that
// a round can sell one voucher from both at once and a killed node's
// orders can be taken over by the other.
const nodeCount = 2

// env is what a run owns: a durable redis-server, a Postgres database of
// its own behind a proxy that can refuse connections, the service nodes,
// and the suite's own direct connections to both stores for the checks.
// Every process it starts is killed by close (and by the kernel if the
// suite dies: Pdeathsig).
type env struct {
	log   *slog.Logger
	dir   string
	redis *testenv.RedisServer
	// redisProxy is the nodes' way to Redis, cut to lose replies;
	// proxy their way to Postgres, cut for outages.
	redisProxy *testenv.Proxy
	proxy      *testenv.Proxy
	dbURL      string // direct, for the checks
	dropDB     func() error
	db         *sql.DB
	rdb        *redis.Client
	nodes      []*testenv.Service
	tokens     *auth.Tokens
	admin      string
	// bin is the service binary; common the settings of every node,
	// whatever its profile; profile the profile the nodes run.
	bin     string
	common  map[string]string
	profile string
	// lockRedis holds the segment leases and job locks of the fallback
	// profile, apart from the stock Redis (started when first needed).
	lockRedis *testenv.RedisServer
	// sentinels and cluster are the replicated Redis deployments of the
	// sentinel and cluster profiles, started when first needed; store is
	// the checks' client of the Redis the nodes sell from now (rdb on
	// the single-Redis profiles).
	sentinels *testenv.SentinelSet
	cluster   *testenv.RedisCluster
	store     redis.UniversalClient
	// sentinelStore and clusterStore are the checks' clients of
	// sentinels and cluster.
	sentinelStore, clusterStore redis.UniversalClient
	// downPrimary is a replicated primary a fault killed, until it is
	// back as a replica.
	downPrimary *testenv.RedisServer

	mu         sync.Mutex
	userTokens map[int64]string
	// stalled is the pid of the redis-server stopped with SIGSTOP, 0 when
	// none is.
	stalled int
}

// profile is how the service nodes run.
type profile struct {
	name  string
	nodes int
	// fallback: the database fallback on (DEGRADE_TO_DB) and the segment
	// leases and job locks on a Redis of their own (LOCK_REDIS_URLS), as
	// in production, so that a stalled stock Redis stalls grabs and not
	// leases.
	fallback bool
	// topology is the Redis the nodes sell from: the single durable
	// redis-server, a Sentinel set or a Redis Cluster. The replicated ones
	// run with REDIS_ACK_REPLICAS=1: an OK is on a replica.
	topology string
}

var (
	// baseProfile: two nodes, locks on the stock Redis, no fallback.
	baseProfile = profile{name: "base", nodes: nodeCount, topology: topologySingle}
	// fallbackProfile: one node, because the fallback refuses to sell
	// while another node is live (it cannot see that node's orders on
	// their way while Redis is down).
	fallbackProfile = profile{name: "fallback", nodes: 1, fallback: true, topology: topologySingle}
	// sentinelProfile: two nodes on a Sentinel set of one primary, two
	// replicas and three sentinels.
	sentinelProfile = profile{name: "sentinel", nodes: nodeCount, topology: topologySentinel}
	// clusterProfile: two nodes on a Redis Cluster of three primaries
	// with a replica each.
	clusterProfile = profile{name: "cluster", nodes: nodeCount, topology: topologyCluster}
)

// profileOf is the profile a round of p runs on.
func profileOf(p plan) profile {
	switch {
	case p.fallback:
		return fallbackProfile
	case p.topology == topologySentinel:
		return sentinelProfile
	case p.topology == topologyCluster:
		return clusterProfile
	}
	return baseProfile
}

// errNotRunnable marks a profile the service refuses to run (a
// configuration it rejects at start): the round is skipped, not passed.
var errNotRunnable = errors.New("not runnable")

// refusedAtStart is what the service says when it refuses a Redis mode
// it does not support (none today; the profile mechanism stays for one).
const refusedAtStart = "is not supported yet"

// nodeSettings are the service's settings in every round: no rate limits
// (they would answer RATE_LIMITED to the suite's bursts of one user), and a
// short take-over of a killed node's order-log entries, so that a round
// drains in seconds rather than the default 30, and a light proof of work
// (the suite's clients solve one per user in the rounds that ask it).
// The red packets' refunds run every second, a second after the expiry.
var nodeSettings = map[string]string{
	"POW_DIFFICULTY":       "10",
	"RATE_USER_PER_SEC":    "0",
	"RATE_VOUCHER_PER_SEC": "0",
	"RATE_IP_PER_SEC":      "0",
	"SHED_IP_PER_SEC":      "0",
	"ORDER_LOG_CLAIM_IDLE": "1s",
	// What refund-wipe rounds plan by (refundGrace).
	"RED_PACKET_REFUND_GRACE":    refundGrace.String(),
	"RED_PACKET_REFUND_INTERVAL": "1s",
	// A waiting room opens this long before its sale begins, and an
	// admission's ticket lasts this long (the queue kind plans by them).
	"TICKET_RELEASE_BEFORE": roomReleaseBefore.String(),
	"TICKET_TTL":            admissionTTL.String(),
	"LOG_LEVEL":             "warn",
	"LOG_FORMAT":            "json",
	"DEMO":                  "false",
}

func newEnv(ctx context.Context, log *slog.Logger, bin, logLevel string) (_ *env, err error) {
	e := &env{log: log, bin: bin, userTokens: map[int64]string{}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "flashsale-chaos-"); err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	if e.bin == "" {
		if e.bin, err = testenv.BuildService(e.dir); err != nil {
			return nil, fmt.Errorf("build service: %w", err)
		}
	}
	redisDir := filepath.Join(e.dir, "redis")
	if err = os.Mkdir(redisDir, 0o700); err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	// Durable (appendfsync always): a kill loses nothing; a round that
	// wants Redis to lose its data wipes the files on purpose.
	if e.redis, err = testenv.StartRedis(redisDir, true); err != nil {
		return nil, err
	}
	if e.redisProxy, err = testenv.StartProxy(e.redis.Addr()); err != nil {
		return nil, err
	}
	e.rdb = redis.NewClient(&redis.Options{Addr: e.redis.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	if e.dbURL, e.dropDB, err = testenv.CreatePostgres(ctx, "flashsale_chaos_"); err != nil {
		return nil, err
	}
	if e.db, err = sql.Open("pgx", e.dbURL); err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	u, err := url.Parse(e.dbURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if e.proxy, err = testenv.StartProxy(u.Host); err != nil {
		return nil, err
	}
	u.Host = e.proxy.Addr()
	secret := randomHex(16)
	e.tokens = auth.NewTokens(secret)
	if e.admin, err = e.tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, 24*time.Hour); err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	e.common = map[string]string{"REDIS_URL": "redis://" + e.redisProxy.Addr() + "/0", "DATABASE_URL": u.String(), "JWT_SECRET": secret}
	maps.Copy(e.common, nodeSettings)
	if logLevel != "" {
		e.common["LOG_LEVEL"] = logLevel
	}
	if err = e.use(ctx, baseProfile); err != nil {
		return nil, err
	}
	return e, nil
}

// use makes the nodes run prof: if they run another profile, they are
// stopped (SIGTERM: each drains its orders and releases its order-id slot)
// and prof's nodes started. Switching to the fallback profile waits until
// no other order-id slot may still answer a sale (the fallback's rule;
// up to half a minute after a node was killed rather than stopped).
func (e *env) use(ctx context.Context, prof profile) error {
	if e.profile == prof.name {
		return nil
	}
	for i, n := range e.nodes {
		if !n.Running() {
			continue
		}
		if _, err := n.Stop(syscall.SIGTERM, 20*time.Second); err != nil {
			e.log.Warn("node not stopped gracefully", "node", i, "err", err)
		}
	}
	e.nodes, e.profile = nil, ""
	settings := maps.Clone(e.common)
	if prof.fallback {
		if e.lockRedis == nil {
			dir := filepath.Join(e.dir, "lock-redis")
			if err := os.Mkdir(dir, 0o700); err != nil {
				return fmt.Errorf("lock redis dir: %w", err)
			}
			lr, err := testenv.StartRedis(dir, false)
			if err != nil {
				return fmt.Errorf("lock redis: %w", err)
			}
			e.lockRedis = lr
		}
		settings["DEGRADE_TO_DB"] = "true"
		settings["LOCK_REDIS_URLS"] = e.lockRedis.URL()
		if err := e.waitOrderIDsIdle(ctx); err != nil {
			return err
		}
	}
	store, err := e.topology(prof.topology, settings)
	if err != nil {
		return err
	}
	e.store = store
	nodeEnv, err := clusterSettings(settings, prof.nodes)
	if err != nil {
		return err
	}
	for i := range prof.nodes {
		n, err := testenv.StartService(ctx, e.bin, nodeEnv[i])
		if err != nil {
			if strings.Contains(err.Error(), refusedAtStart) {
				return fmt.Errorf("%w: REDIS_MODE=%s refused at start: %s", errNotRunnable, prof.topology, refusal(err.Error()))
			}
			return fmt.Errorf("start node %d (%s profile): %w", i, prof.name, err)
		}
		e.nodes = append(e.nodes, n)
	}
	e.profile = prof.name
	return nil
}

// topology starts the Redis deployment of topo when it is not running
// yet, points settings at it and returns the checks' client of it.
func (e *env) topology(topo string, settings map[string]string) (redis.UniversalClient, error) {
	switch topo {
	case topologySentinel:
		if e.sentinels == nil {
			s, err := testenv.StartSentinelSet(filepath.Join(e.dir, "sentinel"), "flashsale", 2, 3)
			if err != nil {
				return nil, fmt.Errorf("sentinel set: %w", err)
			}
			e.sentinels, e.sentinelStore = s, s.FailoverClient()
		}
		settings["REDIS_MODE"], settings["REDIS_URL"] = "sentinel", e.sentinels.URL()
		settings["REDIS_ACK_REPLICAS"] = "1"
		return e.sentinelStore, nil
	case topologyCluster:
		if e.cluster == nil {
			c, err := testenv.StartRedisCluster(filepath.Join(e.dir, "cluster"), 3, 1)
			if err != nil {
				return nil, fmt.Errorf("redis cluster: %w", err)
			}
			e.cluster, e.clusterStore = c, c.Client()
		}
		settings["REDIS_MODE"], settings["REDIS_URL"] = "cluster", e.cluster.URL()
		settings["REDIS_ACK_REPLICAS"] = "1"
		return e.clusterStore, nil
	}
	return e.rdb, nil
}

// refusal is the line of a node's output that says why it refused to
// start.
func refusal(out string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, refusedAtStart) {
			return strings.TrimSpace(line)
		}
	}
	return out
}

// orderIDEpoch is the epoch of the seconds in order ids (persistence/orderids.go:
// seconds since 2023-01-01 UTC), which tb_order_id_node's
// reserved_until_sec counts in.
const orderIDEpoch = 1672531200

// fallbackSlack is how long after another node's last reserved second
// the database fallback starts selling (persistence's fallbackSlack).
const fallbackSlack = 3 * time.Second

// waitOrderIDsIdle waits until every order-id slot's reservation ended
// fallbackSlack ago: until then the fallback answers UNAVAILABLE, and a
// fallback round would not test it.
func (e *env) waitOrderIDsIdle(ctx context.Context) error {
	var last int64
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := e.db.QueryRowContext(qctx, `SELECT COALESCE(MAX(reserved_until_sec), 0) FROM tb_order_id_node`).Scan(&last)
	cancel()
	if err != nil {
		return fmt.Errorf("read order-id reservations: %w", err)
	}
	until := time.Unix(orderIDEpoch+last+1, 0).Add(fallbackSlack + 500*time.Millisecond)
	if wait := time.Until(until); wait > time.Minute {
		return fmt.Errorf("order-id slots reserved until %s: too far ahead to wait", until.Format(time.RFC3339))
	}
	e.log.Debug("waiting for the order-id reservations to end", "until", until)
	if !sleepUntil(ctx, until) {
		return ctx.Err()
	}
	return nil
}

// close kills every process and drops the database; safe on a partly
// built env.
func (e *env) close() {
	for _, n := range e.nodes {
		n.Kill()
	}
	if e.lockRedis != nil {
		e.lockRedis.Kill()
	}
	if e.sentinels != nil {
		_ = e.sentinelStore.Close()
		e.sentinels.Close()
	}
	if e.cluster != nil {
		_ = e.clusterStore.Close()
		e.cluster.Close()
	}
	if e.proxy != nil {
		e.proxy.Close()
	}
	if e.redisProxy != nil {
		e.redisProxy.Close()
	}
	if e.rdb != nil {
		_ = e.rdb.Close()
	}
	if e.redis != nil {
		e.redis.Kill()
	}
	if e.db != nil {
		_ = e.db.Close()
	}
	if e.dropDB != nil {
		if err := e.dropDB(); err != nil {
			e.log.Warn("database not dropped", "err", err)
		}
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// userToken returns a user's bearer token, minted once.
func (e *env) userToken(user int64) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.userTokens[user]; ok {
		return t, nil
	}
	t, err := e.tokens.Issue(auth.Identity{UserID: user, Role: auth.RoleUser}, 24*time.Hour)
	if err != nil {
		return "", fmt.Errorf("token of user %d: %w", user, err)
	}
	e.userTokens[user] = t
	return t, nil
}

// startNode starts a killed node again, retrying while it fails (it
// cannot start while its database refuses connections) until ctx ends.
func (e *env) startNode(ctx context.Context, i int) error {
	n := e.nodes[i]
	for {
		if n.Running() {
			return nil
		}
		err := n.Start(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restart node %d: %w (last: %w)", i, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// heal undoes whatever a round's faults left behind: the proxies let
// connections through, Redis runs (resumed if it was stopped), every node
// runs.
func (e *env) heal(ctx context.Context) error {
	e.proxy.Up()
	e.redisProxy.Up()
	if err := e.resumeRedis(); err != nil {
		return err
	}
	if err := e.startRedis(); err != nil {
		return err
	}
	if err := e.rejoinPrimary(ctx); err != nil {
		return err
	}
	var errs []error
	for i := range e.nodes {
		if err := e.startNode(ctx, i); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startRedis starts Redis if it is not running (answering PING).
func (e *env) startRedis() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if e.rdb.Ping(ctx).Err() == nil {
		return nil
	}
	e.redis.Kill()
	if err := e.redis.Start(); err != nil {
		return fmt.Errorf("start redis: %w", err)
	}
	return nil
}

// killPrimary kills the primary of the replicated Redis the nodes sell
// from (for the cluster, the one that serves voucher) and waits until a
// replica is promoted; the killed node stays down until rejoinPrimary.
func (e *env) killPrimary(ctx context.Context, voucher int64) error {
	var err error
	switch {
	case e.profile == sentinelProfile.name:
		if e.downPrimary, err = e.sentinels.KillPrimary(ctx); err != nil {
			return fmt.Errorf("kill the sentinels' primary: %w", err)
		}
		_, err = e.sentinels.WaitPromoted(ctx, e.downPrimary)
	case e.profile == clusterProfile.name:
		if e.downPrimary, err = e.cluster.KillPrimaryOf(ctx, stockKey(voucher)); err != nil {
			return fmt.Errorf("kill the cluster primary of voucher %d: %w", voucher, err)
		}
		_, err = e.cluster.WaitPromoted(ctx, e.downPrimary)
	default:
		return fmt.Errorf("no replicated Redis in the %s profile", e.profile)
	}
	return err
}

// migrateSlot moves the hash slot of voucher's keys from the Cluster
// primary that serves it to another one, the which-th of the others (by
// address, modulo their count), and returns once every primary names the
// new owner.
func (e *env) migrateSlot(ctx context.Context, voucher int64, which int) error {
	if e.cluster == nil {
		return fmt.Errorf("no Redis Cluster in the %s profile", e.profile)
	}
	key := stockKey(voucher)
	from, err := e.cluster.PrimaryOf(ctx, key)
	if err != nil {
		return fmt.Errorf("primary of voucher %d: %w", voucher, err)
	}
	primaries, err := e.cluster.Primaries(ctx)
	if err != nil {
		return fmt.Errorf("cluster primaries: %w", err)
	}
	others := slices.DeleteFunc(primaries, func(p *testenv.RedisServer) bool { return p == from })
	if len(others) == 0 {
		return fmt.Errorf("no other primary to move voucher %d to", voucher)
	}
	slices.SortFunc(others, func(a, b *testenv.RedisServer) int { return strings.Compare(a.Addr(), b.Addr()) })
	if err := e.cluster.MoveSlotOf(ctx, key, others[which%len(others)]); err != nil {
		return fmt.Errorf("move the slot of voucher %d: %w", voucher, err)
	}
	return nil
}

// rejoinPrimary brings the primary a fault killed back, as a replica of
// the one promoted in its place (after waiting for that promotion, in
// case the fault's own wait gave up); a no-op when none is down.
func (e *env) rejoinPrimary(ctx context.Context) error {
	old := e.downPrimary
	if old == nil {
		return nil
	}
	var err error
	switch {
	case e.sentinels != nil && slices.Contains(e.sentinels.Data, old):
		if _, err = e.sentinels.WaitPromoted(ctx, old); err == nil {
			err = e.sentinels.Rejoin(ctx, old)
		}
	case e.cluster != nil:
		if _, err = e.cluster.WaitPromoted(ctx, old); err == nil {
			err = e.cluster.Rejoin(ctx, old)
		}
	}
	if err != nil {
		return fmt.Errorf("bring the killed primary %s back: %w", old.Addr(), err)
	}
	e.downPrimary = nil
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stallRedis stops redis-server with SIGSTOP: its sockets stay open and
// take what the nodes send, and nothing is executed or answered until
// resumeRedis.
func (e *env) stallRedis(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := e.rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("read redis pid: %w", err)
	}
	var pid int
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, err = strconv.Atoi(v)
		}
	}
	if pid <= 0 || err != nil {
		return fmt.Errorf("no redis pid in INFO server (%v)", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop redis: %w", err)
	}
	e.mu.Lock()
	e.stalled = pid
	e.mu.Unlock()
	return nil
}

// resumeRedis resumes a redis-server stopped by stallRedis (SIGCONT); a
// no-op when none is.
func (e *env) resumeRedis() error {
	e.mu.Lock()
	pid := e.stalled
	e.stalled = 0
	e.mu.Unlock()
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume redis: %w", err)
	}
	return nil
}

// metric reads one sample of a node's /metrics, by its name with its
// labels as the exposition writes them (`name{label="v"}`); 0 when the
// node does not report it.
func (e *env) metric(ctx context.Context, node int, sample string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.nodes[node].Base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read metrics of node %d: %w", node, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, fmt.Errorf("read metrics of node %d: %w", node, err)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// clusterSettings gives each of n nodes its settings: several nodes form
// one actor cluster (automanaged, every node a seed), so that each
// voucher segment is hosted by one of them and the other forwards its
// grabs there. Without it each node hosts every segment itself, and the
// node that does not hold a segment's lease answers its grabs
// UNAVAILABLE for as long as the holder keeps it (measured: 280 of 579
// grabs of a fault-free two-node sale). A restarted node keeps its port.
func clusterSettings(settings map[string]string, n int) ([]map[string]string, error) {
	out := make([]map[string]string, n)
	if n == 1 {
		out[0] = settings
		return out, nil
	}
	ports := make([]string, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cluster port: %w", err)
		}
		_, ports[i], _ = net.SplitHostPort(l.Addr().String())
		_ = l.Close()
	}
	seeds := make([]string, n)
	for i, p := range ports {
		seeds[i] = net.JoinHostPort("127.0.0.1", p)
	}
	name := "chaos" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range out {
		out[i] = maps.Clone(settings)
		out[i]["CLUSTER_PROVIDER"], out[i]["CLUSTER_NAME"] = "automanaged", name
		out[i]["CLUSTER_SEEDS"], out[i]["CLUSTER_AUTOMANAGED_PORT"] = strings.Join(seeds, ","), ports[i]
		out[i]["NODE_ID"] = "chaos-node-" + strconv.Itoa(i)
	}
	return out, nil
}
