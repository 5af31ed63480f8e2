package node

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/config"
	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/internal/breaker"
	"flashsale/persistence"
	"flashsale/usecase/catalog"
	"flashsale/usecase/gate"
	"flashsale/usecase/seckill"
)

// The stores every part is built on, opened first and closed last: the
// database, the stock Redis's clients and its breaker, /readyz's own
// client, the tokens. Each store is asserted against the interface of the
// part that uses it.

var (
	_ graph.Catalog        = (*catalog.Service)(nil)
	_ seckill.Router       = (*actors.Router)(nil)
	_ seckill.Gate         = (*gate.Service)(nil)
	_ actors.Preheater     = (*catalog.Service)(nil)
	_ actors.Store         = (*persistence.Grabs)(nil)
	_ actors.OrderIDs      = (*persistence.OrderIDs)(nil)
	_ actors.Limits        = (*persistence.RateLimits)(nil)
	_ actors.RedisHealth   = (*breaker.Breaker)(nil)
	_ actors.Fallback      = (*persistence.DBGrabs)(nil)
	_ catalog.VoucherStore = (*persistence.Vouchers)(nil)
	_ catalog.StockStore   = (*persistence.Stock)(nil)
	_ httpapi.IPLimiter    = (*persistence.RateLimits)(nil)
	_ httpapi.LoadGauge    = (*actors.Router)(nil)
	_ httpapi.RedisBreaker = (*breaker.Breaker)(nil)
	_ graph.DeadLetters    = (*persistence.DeadLetters)(nil)
	_ graph.Gate           = (*gate.Service)(nil)
	_ gate.Store           = (*persistence.Gate)(nil)
	_ gate.Vouchers        = (*persistence.Vouchers)(nil)
	_ gate.Announcements   = (*persistence.Subscription)(nil)
	_ actors.Announcements = (*persistence.Subscription)(nil)

	_ writer.NamedLogs[*persistence.ConsumerName] = (*persistence.Logs)(nil)
	_ writer.Handler                              = (*persistence.OrderLogHandler)(nil)
	_ writer.LeaseRows                            = (*persistence.WriterLeases)(nil)
)

// The database fallback sells only while the breaker says Redis is down.
var _ persistence.RedisOutage = (*breaker.Breaker)(nil)

func (a *app) openDatabase(ctx context.Context) (err error) {
	dbURL := a.cfg.DatabaseURL
	if dbURL == "" {
		dbURL = a.cfg.SQLitePath
	}
	if a.db, err = persistence.Open(ctx, dbURL); err != nil {
		return &config.Error{Var: "DATABASE_URL", Msg: "cannot use the database: " + err.Error()}
	}
	persistence.SizePool(a.db, a.cfg.DatabaseMaxConns)
	a.traceDB()
	if err = persistence.Migrate(ctx, a.db); err != nil {
		return fmt.Errorf("database schema: %w", err)
	}
	return nil
}

func (a *app) closeDatabase() {
	if a.db != nil {
		_ = a.db.Close()
	}
}

func (a *app) openRedis(ctx context.Context) (err error) {
	cfg, log := a.cfg, a.log
	var target persistence.RedisTarget
	if cfg.RedisURL == "" {
		if a.mini, err = miniredis.Run(); err != nil {
			return fmt.Errorf("start embedded redis: %w", err)
		}
		target = persistence.SingleTarget(redis.Options{Addr: a.mini.Addr()})
	} else if target, err = persistence.ParseRedisTarget(cfg.RedisMode, cfg.RedisURL); err != nil {
		return &config.Error{Var: "REDIS_URL", Msg: err.Error()} // validated by config
	}
	a.target = target
	// Every client of the stock Redis is built from the one target, so
	// each gets the same tuning in every REDIS_MODE.
	a.bg = a.traceRedis(target.Client(persistence.BackgroundTuning()))
	a.rdb = a.traceRedis(target.Client(persistence.RequestTuning(0)))
	a.breaker = breaker.New(log, breaker.Options{OnClose: a.afterRedisOutage})
	// On a cluster, one circuit per node: a shard failing over leaves the
	// others selling; the probe forgets the nodes that serve no slots.
	a.breaker.Masters = persistence.Masters(a.bg)
	// A failover ended: every cluster client follows the new primaries at
	// once, those that made no call meanwhile too, and the writers stop
	// backing off.
	a.breaker.Dropped = func(ctx context.Context) {
		a.target.ReloadSlotMaps(ctx)
		a.wakers.wake()
	}
	// After the breaker: a command it refuses never reached Redis.
	persistence.AddBreakerHooks(a.rdb, a.breaker, persistence.RedisErrors{})
	persistence.AddHooks(a.bg, persistence.RedisErrors{})
	a.acked = a.rdb
	if acks := acksOf(cfg); acks.Replicas > 0 {
		// A pipeline reads its replies under the client's read timeout,
		// WAIT's included: the grab scripts get a client whose timeout
		// leaves room for the acknowledgement, so that a slow replica is
		// an UNAVAILABLE batch, not a failed call that opens the breaker.
		tuning := persistence.RequestTuning(0)
		tuning.Read += acks.Timeout
		a.acked = a.traceRedis(target.Client(tuning))
		persistence.AddBreakerHooks(a.acked, a.breaker, persistence.RedisErrors{})
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = a.bg.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return &config.Error{Var: "REDIS_URL", Msg: "cannot reach redis: " + err.Error()}
	}
	if cfg.RedisURL != "" {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		policy, err := persistence.EvictingPolicy(pctx, a.bg)
		cancel()
		if err != nil {
			log.Warn("redis maxmemory-policy unreadable; the scripts refuse to sell while it evicts keys", "err", err)
		} else if policy != "" {
			return &config.Error{Var: "REDIS_URL", Msg: persistence.EvictingPolicyError(policy)}
		}
	}
	checkRedisDurability(ctx, cfg, a.bg, log)
	return nil
}

func (a *app) closeRedis() {
	if a.acked != nil && a.acked != a.rdb {
		_ = a.acked.Close()
	}
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
	if a.bg != nil {
		_ = a.bg.Close()
	}
	if a.mini != nil {
		a.mini.Close()
	}
}

func (a *app) openReadiness(context.Context) error {
	// /readyz pings through a client of its own: the shared one waits
	// seconds for a stalled Redis, and its pool may be busy with grabs.
	a.probe = a.traceRedis(a.target.Client(persistence.ClientTuning{ContextTimeout: true,
		Dial: httpapi.ReadyTimeout, Read: httpapi.ReadyTimeout, Write: httpapi.ReadyTimeout, Pool: httpapi.ReadyTimeout,
		MaxRetries: -1, PoolSize: 2, MinIdleConns: 0}))
	a.probe.AddHook(persistence.RedisErrors{})
	a.ready = &httpapi.Readiness{
		Redis: func(ctx context.Context) (string, error) {
			// The token the scripts verify a load under says whether
			// Redis's maxmemory-policy evicts keys.
			token, err := persistence.ReadRunID(ctx, a.probe)
			return persistence.ParseRunToken(token).Evicting, err
		},
		Breaker: a.breaker,
		DB:      a.db.PingContext,
		Held: func() int {
			if a.holds == nil {
				return 0
			}
			return a.holds.Held()
		},
		Fallback: a.cfg.DegradeToDB,
	}
	return nil
}

func (a *app) closeReadiness() {
	if a.probe != nil {
		_ = a.probe.Close()
	}
}

func (a *app) openTokens(context.Context) (err error) {
	a.secret = a.cfg.JWTSecret
	if a.secret == "" { // embedded mode only; config requires it otherwise
		if a.secret, err = auth.SecretFromFile(config.SecretPath(a.cfg.SQLitePath)); err != nil {
			return &config.Error{Var: "JWT_SECRET", Msg: err.Error()}
		}
	}
	a.tokens = auth.NewTokens(a.secret, auth.WithMaxTTL(a.cfg.JWTMaxTTL))
	return nil
}

// acksOf is the grab batches' acknowledgement as cfg asks for it, its
// timeout at persistence's default when unset: the node adds it to the
// clients' and the router's own deadlines.
func acksOf(cfg config.Config) persistence.Acks {
	acks := persistence.Acks{Replicas: cfg.RedisAckReplicas, Timeout: cmp.Or(cfg.RedisAckTimeout, persistence.AckTimeoutDefault)}
	if cfg.RedisAckAOF {
		acks.AOF = &persistence.AOFAcks{}
	}
	return acks
}
