package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver for the checks' own connection
	"github.com/redis/go-redis/v9"

	"flashsale/internal/auth"
	"flashsale/internal/testenv"
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

	mu         sync.Mutex
	userTokens map[int64]string
}

// nodeSettings are the service's settings in every round: no rate limits
// (they would answer RATE_LIMITED to the suite's bursts of one user), and a
// short take-over of a killed node's order-log entries, so that a round
// drains in seconds rather than the default 30, and a light proof of work
// (the suite's clients solve one per user in the rounds that ask it).
var nodeSettings = map[string]string{
	"POW_DIFFICULTY":       "10",
	"RATE_USER_PER_SEC":    "0",
	"RATE_VOUCHER_PER_SEC": "0",
	"RATE_IP_PER_SEC":      "0",
	"ORDER_LOG_CLAIM_IDLE": "1s",
	"LOG_LEVEL":            "warn",
	"LOG_FORMAT":           "json",
	"DEMO":                 "false",
}

func newEnv(ctx context.Context, log *slog.Logger, bin string) (_ *env, err error) {
	e := &env{log: log, userTokens: map[int64]string{}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "flashsale-chaos-"); err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	if bin == "" {
		if bin, err = testenv.BuildService(e.dir); err != nil {
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
	if e.redisProxy, err = testenv.NewProxy(e.redis.Addr()); err != nil {
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
	if e.proxy, err = testenv.NewProxy(u.Host); err != nil {
		return nil, err
	}
	u.Host = e.proxy.Addr()
	secret := randomHex(16)
	e.tokens = auth.NewTokens(secret)
	if e.admin, err = e.tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, 24*time.Hour); err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	settings := map[string]string{"REDIS_URL": "redis://" + e.redisProxy.Addr() + "/0", "DATABASE_URL": u.String(), "JWT_SECRET": secret}
	for k, v := range nodeSettings {
		settings[k] = v
	}
	for i := range nodeCount {
		n, err := testenv.StartService(ctx, bin, settings)
		if err != nil {
			return nil, fmt.Errorf("start node %d: %w", i, err)
		}
		e.nodes = append(e.nodes, n)
	}
	return e, nil
}

// close kills every process and drops the database; safe on a partly
// built env.
func (e *env) close() {
	for _, n := range e.nodes {
		n.Kill()
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
// connections through, Redis runs, every node runs.
func (e *env) heal(ctx context.Context) error {
	e.proxy.Up()
	e.redisProxy.Up()
	if err := e.startRedis(); err != nil {
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
