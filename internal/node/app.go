package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/internal/breaker"
	"flashsale/internal/catalog"
	"flashsale/internal/config"
	"flashsale/internal/connlimit"
	"flashsale/internal/gate"
	"flashsale/internal/lease"
	"flashsale/internal/lifecycle"
	"flashsale/internal/live"
	"flashsale/internal/playground"
	"flashsale/internal/seckill"
	"flashsale/persistence"
)

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

// app is the wired service. start builds it from one ordered list of
// steps (order, below): database, Redis, stores, services, actors, GraphQL,
// HTTP; stop runs the steps' stops in the reverse order.
type app struct {
	cfg   config.Config
	log   *slog.Logger
	hooks Hooks // zero in production
	db    *bun.DB
	mini  *miniredis.Miniredis // embedded mode only
	// target is the stock Redis every client of it is built from.
	target persistence.RedisTarget
	// rdb serves request paths (grabs, rate limits, stock reads): short
	// deadlines and the circuit breaker. bg serves the background work
	// (the persistence actors, the event watcher), which retries with
	// backoff on its own.
	rdb redis.UniversalClient
	bg  redis.UniversalClient
	// acked runs the grab scripts when replicas must acknowledge them
	// (REDIS_ACK_REPLICAS): the request path's client, with room in its
	// read deadline for WAIT; rdb otherwise.
	acked    redis.UniversalClient
	breaker  *breaker.Breaker
	fallback *persistence.DBGrabs  // DEGRADE_TO_DB only
	probe    redis.UniversalClient // /readyz's own client, with short timeouts
	holds    *catalog.Holds        // this node's reloads that hold their sales
	ready    *httpapi.Readiness
	secret   string // JWT_SECRET, or the embedded mode's from its file
	tokens   *auth.Tokens
	stock    *persistence.Stock // the request path's
	catalog  *catalog.Service
	ids      *persistence.OrderIDs
	limits   *persistence.RateLimits
	stopIDs  func() // releases the order-id slot
	router   *actors.Router
	writer   *writer.Writer // the order writer, set once it runs
	orders   *ordersPart
	locks    lockPart
	redPkts  *redPacketsPart
	live     *live.Service
	gate     *gate.Service
	gateRdb  redis.UniversalClient // the gate's own client, with Hooks.GateRedis only
	gql      http.Handler          // /query
	routes   http.Handler          // every route, behind hosts in embedded mode (httpapi.Routes)
	// hosts, in embedded mode, refuses requests to other Hosts than this
	// machine's (DNS rebinding); nil in real mode.
	hosts *httpapi.LocalHosts
	// prober (the breaker's probe), redisWatch and statusSync are this
	// node's own maintenance jobs, run on every node.
	prober, redisWatch, statusSync lifecycle.Service
	// warmer preheats every live voucher through the background client:
	// at start, and again when Redis may have lost loads (rewarm, one run
	// at a time, waited for by closeBreaker).
	warmer *catalog.Service
	// rewarmCtx is the context of the rewarm runs: the breaker step's
	// loops', which end before its stop waits for them.
	rewarmCtx              atomic.Pointer[context.Context]
	rewarming, rewarmAgain atomic.Bool
	rewarms                sync.WaitGroup
	listener               net.Listener
	http                   *http.Server
	profiler               *profiler // PPROF_ADDR only
	// cancelRequests ends every request's context; the http step's stop
	// calls it, after the shutdown has let the open requests finish.
	cancelRequests context.CancelFunc
	// closeWebsockets is the shutdown's slot for closing the websockets
	// (each gets its close frame), after the grabs are answered and the
	// order log is drained, before the actors stop. It returns how many it
	// closed, or -1 when it does not count them. Until the websocket hub
	// provides one it cancels the request contexts, which ends every
	// websocket's connection.
	closeWebsockets func() int

	// started are the steps begun so far, in start order, each with the
	// loops it runs; stop ends them from the last.
	started []started
}

// step is one line of the start order: start acquires or starts what the
// step names, running its goroutines on bg; stop releases it. A stop runs
// after the step's loops have ended, also for a step whose start failed
// half-way, so it must be safe on what is nil.
type step struct {
	name  string
	start func(ctx context.Context, bg *loops) error
	stop  func()
}

type started struct {
	step
	loops *loops
}

// order is the node's start order; each line says why it stands where it
// does. stop runs it backwards: what a step uses stops after it.
func (a *app) order() []step {
	return []step{
		// First: every other step reads or writes the schema, and the
		// order ids and the fallback live in the database.
		{"database", a.openDatabase, a.closeDatabase},
		// Stock truth is Redis: an unreachable REDIS_URL stops the start
		// before anything is built on it.
		{"redis", a.openRedis, a.closeRedis},
		// /readyz answers from its own client, built beside the others.
		{"readiness", a.openReadiness, a.closeReadiness},
		// The tokens need the secret, which embedded mode keeps beside
		// its database file.
		{"tokens", a.openTokens, nil},
		// Every live voucher is in Redis before an actor asks for one.
		{"catalog", a.openCatalog, nil},
		// Order ids come from a node slot leased in the database; the
		// router and the red packets take ids, so it closes after them.
		{"order ids", a.startOrderIDs, a.closeOrderIDs},
		// The Redlock: segment leases of the actors and the singletons of
		// the maintenance, released after both stopped.
		{"locks", func(context.Context, *loops) error { return a.openLocks() }, a.locks.close},
		// Orders after the sale: pay timeout, sweeper, reconciliation.
		{"orders", a.startOrdersStep, func() { a.orders.stop() }},
		// Live stock needs the orders' service; the router's sales reach
		// it (Sold), and no grab is taken before HTTP.
		{"live", a.startLiveStep, nil},
		// The sequencers: they take the leases and the ids above, and
		// tell live stock what they sold.
		{"router", a.startRouter, a.closeRouter},
		// The breaker's probe and its re-sync after an outage use the
		// router: closed before it.
		{"breaker watch", a.watchBreaker, a.closeBreaker},
		// The order writer persists what the router's grabs log; the
		// shutdown drains it while the router still answers.
		{"order writer", a.startOrderWriter, a.stopOrderWriter},
		// Voucher events (pause, restock, ...) reach the router's actors.
		{"voucher events", a.watchVoucherEvents, nil},
		// Status changes Redis missed are copied by every node.
		{"status sync", a.startStatusSync, a.stopStatusSync},
		// Red packets need the router's actor system and the orders' lock.
		{"red packets", a.startRedPacketsStep, func() { a.redPkts.stop() }},
		// The gate loads its blocklist before the first grab.
		{"gate", a.startGateStep, a.closeGate},
		// GraphQL over everything above.
		{"graphql", a.buildHandler, nil},
		// The port is bound once everything it serves is built: a node
		// that cannot listen fails its start before it is announced.
		{"listener", a.listen, a.closeListener},
		// A cluster member is sent grabs by the others as soon as it
		// joins: it joins once everything a grab reaches is built and its
		// port is bound (leaving is the router's close).
		{"cluster", a.joinCluster, nil},
		// The profiler listens on its own private address.
		{"profiler", a.startProfilerStep, func() { a.profiler.close() }},
		// The HTTP server serves once run calls serve; its requests'
		// contexts end first in stop, after the shutdown let them finish.
		{"http", a.buildServer, a.endRequests},
	}
}

func start(ctx context.Context, cfg config.Config, log *slog.Logger, hooks Hooks) (_ *app, err error) {
	a := &app{cfg: cfg, log: log, hooks: hooks}
	defer func() {
		if err != nil {
			a.stop()
		}
	}()
	if err := a.begin(ctx, a.order()); err != nil {
		return nil, err
	}
	a.logConnected(a.target.String())
	return a, nil
}

// begin starts steps in their order, each with loops of its own, and
// stops at the first that fails; that one counts as started, so that end
// releases what it acquired before it failed.
func (a *app) begin(ctx context.Context, steps []step) error {
	for _, s := range steps {
		bg := newLoops(ctx)
		a.started = append(a.started, started{step: s, loops: bg})
		if err := s.start(ctx, bg); err != nil {
			a.log.Debug("start step failed", "step", s.name, "err", err)
			return err
		}
	}
	return nil
}

// end stops the started steps from the last: each step's loops end
// before its stop runs. Safe to repeat.
func (a *app) end() {
	for i := len(a.started) - 1; i >= 0; i-- {
		s := a.started[i]
		s.loops.stop()
		if s.stop != nil {
			s.stop()
		}
	}
	a.started = nil
}

// loops are the goroutines of one start step, on a context of their own:
// the step's stop cancels it and waits for them, so that each step's
// loops end in the reverse of the start order.
type loops struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newLoops derives the loops' context from ctx without its cancellation:
// they run until stop, not until the start's context ends.
func newLoops(ctx context.Context) *loops {
	l := &loops{}
	l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return l
}

// Go runs fn on the loops' context until they stop.
func (l *loops) Go(fn func(ctx context.Context)) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		fn(l.ctx)
	}()
}

func (l *loops) stop() {
	l.cancel()
	l.wg.Wait()
}

func (a *app) openDatabase(ctx context.Context, _ *loops) (err error) {
	dbURL := a.cfg.DatabaseURL
	if dbURL == "" {
		dbURL = a.cfg.SQLitePath
	}
	if a.db, err = persistence.Open(ctx, dbURL); err != nil {
		return &config.Error{Var: "DATABASE_URL", Msg: "cannot use the database: " + err.Error()}
	}
	persistence.SizePool(a.db, a.cfg.DatabaseMaxConns)
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

func (a *app) openRedis(ctx context.Context, _ *loops) (err error) {
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
	a.bg = target.Client(persistence.BackgroundTuning())
	a.rdb = target.Client(persistence.RequestTuning(0))
	a.breaker = breaker.New(log, breaker.Options{OnClose: a.afterRedisOutage})
	// On a cluster, one circuit per node: a shard failing over leaves the
	// others selling; the probe forgets the nodes that serve no slots.
	a.breaker.Masters = persistence.Masters(a.bg)
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
		a.acked = target.Client(tuning)
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

func (a *app) openReadiness(context.Context, *loops) error {
	// /readyz pings through a client of its own: the shared one waits
	// seconds for a stalled Redis, and its pool may be busy with grabs.
	a.probe = a.target.Client(persistence.ClientTuning{ContextTimeout: true,
		Dial: httpapi.ReadyTimeout, Read: httpapi.ReadyTimeout, Write: httpapi.ReadyTimeout, Pool: httpapi.ReadyTimeout,
		MaxRetries: -1, PoolSize: 2, MinIdleConns: 0})
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

func (a *app) openTokens(context.Context, *loops) (err error) {
	a.secret = a.cfg.JWTSecret
	if a.secret == "" { // embedded mode only; config requires it otherwise
		if a.secret, err = auth.SecretFromFile(config.SecretPath(a.cfg.SQLitePath)); err != nil {
			return &config.Error{Var: "JWT_SECRET", Msg: err.Error()}
		}
	}
	a.tokens = auth.NewTokens(a.secret, auth.WithMaxTTL(a.cfg.JWTMaxTTL))
	return nil
}

func (a *app) openCatalog(ctx context.Context, bg *loops) error {
	log := a.log
	stock := persistence.NewStock(a.rdb)
	if a.mini != nil {
		// The embedded Redis lives and dies with this process, and so does
		// the only order writer that could hold orders of a lost load: a
		// reload has nobody to wait for (see persistence.ReloadHoldDefault).
		stock.ReloadHold = time.Millisecond
	}
	a.stock = stock
	a.catalog = catalog.New(persistence.NewVouchers(a.db), stock, log)
	// Reloads hold their sales only until no order writer can hold an
	// order of the lost load (the writers' lease rows).
	holds := catalog.NewHolds(persistence.HoldRows(a.db), stock, persistence.ReloadHoldDefault, log)
	a.catalog.Holds, a.holds = holds, holds
	bg.Go(holds.Run)
	// The start-up preheat reads every live voucher through the background
	// client: a request's 200 ms deadline is for a shopper waiting, and a
	// busy Redis must not stop a node from starting.
	startStock := persistence.NewStock(a.bg)
	startStock.ReloadHold = stock.ReloadHold
	a.warmer = catalog.New(persistence.NewVouchers(a.db), startStock, log)
	a.warmer.Holds = holds
	n, err := a.warmer.PreheatAll(ctx)
	if err != nil {
		return fmt.Errorf("preheat vouchers: %w", err)
	}
	log.Info("seckill vouchers ready in redis", "vouchers", n)
	// The request cost prices texts by the longest stored (graph.Complexity).
	if err := a.catalog.RefreshTextSizes(ctx, true); err != nil {
		return fmt.Errorf("read the longest voucher texts: %w", err)
	}
	return nil
}

func (a *app) startOrderIDs(ctx context.Context, _ *loops) error {
	// Order ids come from a node slot leased in the database, not from
	// Redis: they must not repeat when Redis loses its data.
	a.ids = persistence.NewOrderIDs(a.db, a.log, persistence.OrderIDOptions{})
	if err := a.ids.Acquire(ctx); err != nil {
		return fmt.Errorf("order ids: %w", err)
	}
	keeper := lease.KeepSlot("order-id slot", a.ids, a.log)
	_ = keeper.Start(ctx)
	a.stopIDs = keeper.Stop
	warnLoneNodes(ctx, a.cfg, a.ids, a.log)
	return nil
}

// otherNodes counts the other nodes that sell from the same database.
type otherNodes interface {
	OtherLiveNodes(ctx context.Context) (int, error)
}

// warnLoneNodes warns when another node sells from this node's database
// while this one runs without an actor cluster (CLUSTER_PROVIDER=test):
// each such node hosts every voucher segment itself, the nodes contend for
// each segment's lease, and the one without it answers UNAVAILABLE
// (measured in a two-node sale with no fault: 280 of 579 grabs).
func warnLoneNodes(ctx context.Context, cfg config.Config, nodes otherNodes, log *slog.Logger) {
	if cfg.Embedded() || cfg.ClusterProvider != "test" {
		return
	}
	n, err := nodes.OtherLiveNodes(ctx)
	if err != nil || n == 0 {
		return
	}
	log.Warn("other nodes sell from this database, but CLUSTER_PROVIDER=test makes every node host every voucher segment "+
		"itself: the nodes contend for each segment's lease and answer UNAVAILABLE while another holds it; "+
		"set CLUSTER_PROVIDER=automanaged (or etcd) and one CLUSTER_NAME on every node", "other_nodes", n)
}

func (a *app) closeOrderIDs() {
	if a.stopIDs != nil {
		a.stopIDs() // after the router and the red packets: no grab takes ids any more
	}
}

func (a *app) startRouter(_ context.Context, bg *loops) error {
	cfg, log := a.cfg, a.log
	acks := acksOf(cfg)
	a.limits = persistence.NewRateLimits(a.rdb, cfg.RateVoucherPerSec, cfg.RateIPPerSec)
	routerOpts := actors.Options{
		Limits:      a.limits,
		UserRate:    cfg.RateUserPerSec,
		BatchSize:   cfg.GrabBatchSize,
		QueueBound:  cfg.GrabQueueBound,
		GrabTimeout: cfg.GrabTimeout,
		Redis:       a.breaker,
	}
	if acks.Replicas > 0 {
		// A script call and a whole batch get the acknowledgement's wait
		// on top of their own deadlines.
		routerOpts.CallTimeout = actors.CallTimeoutDefault + acks.Timeout
		routerOpts.BatchTimeout = actors.BatchTimeoutDefault + acks.Timeout
	}
	grabClient := a.acked
	if a.hooks.GrabClient != nil {
		grabClient = a.hooks.GrabClient(grabClient)
	}
	grabs := persistence.NewGrabs(grabClient)
	grabs.Acks = acks
	if a.mini == nil {
		// The node keeps its OK'd orders until a writer has read them, and
		// appends them again if Redis loses them first (the embedded Redis
		// dies with the process and this copy).
		shadow := persistence.NewSoldShadow(a.bg, a.db, cfg.NodeID, log)
		grabs.Shadow = shadow
		bg.Go(shadow.Run)
	}
	if cfg.DegradeToDB {
		a.fallback = persistence.NewDBGrabs(a.db, a.breaker, 0)
		routerOpts.Fallback = a.fallback
	}
	routerOpts.Sold = a.live.Sold
	routerOpts.Leases = newSegmentLeases(a.locks.redlock, cfg.SegmentLeaseTTL)
	grabTimeout := cmp.Or(cfg.GrabTimeout, actors.GrabTimeoutDefault)
	routerOpts.LeaseWait = min(cfg.SegmentLeaseTTL+time.Second, max(grabTimeout-time.Second, grabTimeout/2))
	if a.hooks.Actors != nil {
		a.hooks.Actors(&routerOpts)
	}
	if cfg.ClusterProvider == "test" {
		// One node: plain local actors behind the same router, under the
		// same leases and fencing (docs/DECISIONS.md, "A single node is
		// not a cluster member").
		a.router = actors.NewRouter(grabs, a.ids, a.catalog, log, routerOpts)
		return a.router.Start(bg.ctx)
	}
	co, err := clusterOptions(cfg)
	if err != nil {
		return err
	}
	if a.router, err = actors.NewClusteredRouter(grabs, a.ids, a.catalog, log, routerOpts, co); err != nil {
		return fmt.Errorf("cluster (%s): %w", clusterLabel(cfg), err)
	}
	return a.router.Start(bg.ctx)
}

func (a *app) joinCluster(context.Context, *loops) error {
	if c := a.router.Cluster(); c != nil {
		c.Join()
	}
	return nil
}

func (a *app) closeRouter() {
	if a.router != nil {
		a.router.Stop() // drains first if the shutdown did not
	}
}

// watchBreaker starts the breaker's probe, which finds Redis back after
// an outage, and the watch that says in one line when Redis changed
// (redisWatch; not for the in-process Redis, which never does).
func (a *app) watchBreaker(_ context.Context, bg *loops) error {
	a.rewarmCtx.Store(&bg.ctx)
	a.prober = a.breaker.Prober(breakerProbeInterval, func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() })
	if err := a.prober.Start(bg.ctx); err != nil {
		return err
	}
	if a.mini == nil {
		w := newRedisWatch(a.bg, a.log)
		w.onChange = a.rewarm
		a.redisWatch = w.job()
		return a.redisWatch.Start(bg.ctx)
	}
	return nil
}

func (a *app) closeBreaker() {
	if a.redisWatch != nil {
		a.redisWatch.Stop()
	}
	if a.prober != nil {
		a.prober.Stop()
	}
	if a.breaker != nil {
		a.breaker.Close() // a re-sync after an outage uses the router and the database
	}
	a.rewarms.Wait() // on the step's loops' context, ended before this stop
}

func (a *app) startOrderWriter(ctx context.Context, bg *loops) error {
	writerOpts := logConsumerOptions(a.cfg)
	writerOpts.Reclaim = func(ctx context.Context, fn func(context.Context) error) (bool, error) {
		return a.locks.redlock.Do(ctx, "order-log-reclaim", fn)
	}
	fam := writer.Orders(persistence.NewOrderLogs(a.bg),
		persistence.NewOrderLogHandler(a.db, a.bg, a.log, persistence.BatchOptions(writerOpts.StoreOptions())),
		persistence.NewWriterLeases(a.db, persistence.OrdersFamily))
	w := writer.New(fam, a.router.ActorSystem(), a.log, writerOpts)
	if err := w.Acquire(ctx); errors.Is(err, lease.ErrInUse) {
		return &config.Error{Var: "NODE_ID", Msg: err.Error() + "; give each node its own NODE_ID"}
	} else if err != nil {
		return fmt.Errorf("order writer: %w", err)
	}
	// The persistence actor lives in the router's actor system, supervised
	// there; its step's stop stops it before the router closes the system.
	a.writer = w
	return w.Start(ctx)
}

func (a *app) stopOrderWriter() {
	if a.writer != nil {
		a.writer.Stop()
	}
}

func (a *app) watchVoucherEvents(_ context.Context, bg *loops) error {
	events := persistence.NewStock(a.bg).Subscribe(bg.ctx)
	bg.Go(func(ctx context.Context) {
		defer events.Close()
		if err := a.router.Follow(ctx, events); err != nil {
			a.log.Error("voucher-event watcher stopped", "err", err)
		}
	})
	return nil
}

func (a *app) startStatusSync(_ context.Context, bg *loops) error {
	// Every node copies to Redis the status changes Redis missed (a pause
	// whose Redis write failed), so that the record wins within a bound.
	a.statusSync = catalog.NewStatusSync(a.catalog, a.cfg.StatusSyncInterval, a.log)
	return a.statusSync.Start(bg.ctx)
}

func (a *app) stopStatusSync() {
	if a.statusSync != nil {
		a.statusSync.Stop()
	}
}

func (a *app) startOrdersStep(_ context.Context, bg *loops) (err error) {
	a.orders, err = a.startOrders(bg.ctx, a.stock)
	return err
}

func (a *app) startRedPacketsStep(ctx context.Context, bg *loops) (err error) {
	a.redPkts, err = a.startRedPackets(ctx, bg)
	return err
}

func (a *app) startLiveStep(_ context.Context, bg *loops) error {
	a.live = a.startLive(bg)
	return nil
}

func (a *app) startGateStep(ctx context.Context, bg *loops) (err error) {
	a.gate, err = a.startGate(ctx, bg, a.secret)
	return err
}

func (a *app) closeGate() {
	if a.gateRdb != nil {
		_ = a.gateRdb.Close()
	}
}

func (a *app) buildHandler(context.Context, *loops) error {
	cfg, log := a.cfg, a.log
	var grabber seckill.Router = a.router
	if a.hooks.Grabber != nil {
		grabber = a.hooks.Grabber(grabber)
	}
	opts := httpapi.HandlerOptions{
		Tokens:                    a.tokens,
		Log:                       log,
		IPLimit:                   a.limits,
		FloodPerSec:               cfg.ShedIPPerSec,
		Anonymous:                 httpapi.AnonymousBudget{InFlight: cfg.AnonMaxInFlight, PerSecond: cfg.AnonPerSec, Wait: cfg.AnonWait},
		Shed:                      httpapi.LoadShedding{Gauge: a.router, QueueDepth: cfg.ShedQueueDepth, GrabLatency: cfg.ShedGrabLatency},
		Introspection:             graph.IntrospectionMode(cfg.Introspection),
		CompiledGrabs:             cfg.CompiledGrabs,
		Limits:                    httpapi.Limits{MaxAnswerBytes: int64(cfg.MaxResponseBytes), MaxComplexity: cfg.MaxRequestCost},
		WebsocketMaxOperations:    cfg.WSMaxOperations,
		WebsocketMaxPerUser:       cfg.WSMaxPerUser,
		WebsocketMaxPerIP:         cfg.WSMaxPerIP,
		CORSOrigins:               cfg.CORSOrigins(),
		WebsocketSubscribesPerSec: cfg.WSSubscribesPerSec,
		WebsocketMaxUninitialized: cfg.WSMaxUninitialized,
		// Embedded mode serves local Hosts only, so a developer's own.
		Suggestions: cfg.Embedded(),
	}
	// The budget's defaults are the handler's (httpapi), its store persistence.
	budget, restore := cmp.Or(cfg.CostBudget, httpapi.CostBudgetDefault), cmp.Or(cfg.CostRestorePerSec, httpapi.CostRestorePerSecDefault)
	if b := persistence.NewCostBudgets(a.rdb, budget, restore); b != nil {
		opts.Budget = b
	}
	if a.hooks.HTTP != nil {
		a.hooks.HTTP(&opts)
	}
	gql := httpapi.NewHandler(&graph.Resolver{Catalog: a.catalog, Seckill: seckill.New(a.gate, grabber), DeadLetters: persistence.NewDeadLetters(a.db), Reconciler: reconciliationQuery{a.orders.reconciler},
		Orders: a.orders.service, Reconciliations: a.orders.reconciler, Live: a.live, Gate: a.gate, RedPackets: a.redPkts.service}, opts)
	a.gql = gql
	pgOpts, err := playgroundOptions(cfg, a.tokens)
	if err != nil {
		return err
	}
	if cfg.Embedded() {
		// Every route, before anything reads the request: see
		// httpapi.LocalHosts.
		a.hosts, err = httpapi.NewLocalHosts(cfg.EmbeddedAllowedHosts)
		if err != nil {
			return &config.Error{Var: "EMBEDDED_ALLOWED_HOSTS", Msg: err.Error()}
		}
	}
	a.routes = httpapi.Routes(httpapi.Endpoints{
		GraphQL:    gql,
		Playground: playground.Handler("flashsale", "/query", pgOpts...),
		Assets:     playground.Assets(),
		Ready:      a.ready,
		Metrics:    promhttp.Handler(),
		Hosts:      a.hosts,
	})
	return nil
}

func (a *app) listen(context.Context, *loops) (err error) {
	if a.listener, err = net.Listen("tcp", a.cfg.HTTPAddr); err != nil {
		return &config.Error{Var: "HTTP_ADDR", Msg: err.Error()}
	}
	// Admission of new connections per client address, before net/http
	// reads them: see connlimit.
	limited, err := connlimit.New(a.listener, connlimit.Config{
		PerSecond:  a.cfg.ConnPerIPPerSec,
		Burst:      a.cfg.ConnPerIPBurst,
		Wait:       a.cfg.ConnPerIPWait,
		MaxWaiting: a.cfg.ConnMaxWaiting,
	})
	if err != nil {
		return err // stop closes the listener
	}
	a.listener = limited
	return nil
}

func (a *app) closeListener() {
	if a.listener != nil { // Shutdown closed it already if serve ran; a second Close is harmless
		_ = a.listener.Close()
	}
}

func (a *app) startProfilerStep(context.Context, *loops) (err error) {
	a.profiler, err = startProfiler(a.cfg.PprofAddr, a.hosts, a.log)
	return err
}

func (a *app) buildServer(ctx context.Context, _ *loops) error {
	cfg := a.cfg
	requests, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	a.cancelRequests = cancelRequests
	a.closeWebsockets = func() int { cancelRequests(); return -1 }
	a.http = httpapi.NewServer(requests, a.routes, httpapi.ServerOptions{
		HeaderTimeout:  cfg.HTTPHeaderTimeout,
		BodyTimeout:    cfg.HTTPBodyTimeout,
		WriteTimeout:   cfg.HTTPWriteTimeout,
		MaxHeaderBytes: cfg.HTTPMaxHeaderBytes,
	})
	return nil
}

func (a *app) endRequests() {
	if a.cancelRequests != nil {
		a.cancelRequests()
	}
}

// startGate wires the grab gate against bots and scalpers and runs its
// refresh in the background. Its key is TICKET_SECRET, or derived from the
// JWT secret, which every node shares: a ticket from one node holds on
// every other.
func (a *app) startGate(ctx context.Context, bg *loops, jwtSecret string) (*gate.Service, error) {
	key := gate.KeyFrom(jwtSecret)
	if a.cfg.TicketSecret != "" {
		key = []byte(a.cfg.TicketSecret)
	}
	rdb := a.rdb
	if a.hooks.GateRedis != nil {
		// A client of its own, tuned and guarded as the request path's,
		// so that the hook sees the gate's commands and no others.
		a.gateRdb = a.target.Client(persistence.RequestTuning(0))
		a.gateRdb.AddHook(a.breaker)
		a.gateRdb.AddHook(persistence.RedisErrors{})
		a.gateRdb.AddHook(a.hooks.GateRedis)
		rdb = a.gateRdb
	}
	g := gate.New(persistence.NewGate(rdb), persistence.NewVouchers(a.db), a.log, gate.Options{
		Key:           key,
		ReleaseBefore: a.cfg.TicketReleaseBefore,
		TicketTTL:     a.cfg.TicketTTL,
		ChallengeTTL:  a.cfg.ChallengeTTL,
		Difficulty:    a.cfg.PowDifficulty,
		Refresh:       a.cfg.GateRefresh,
	})
	// The gate reads through the request path's client, which fails fast
	// by design (one dial, 200 ms); at start a Redis or sentinel slow to
	// answer must not stop the node, so the first read is tried for up to
	// 5 s (measured: nodes failing to start with "i/o timeout" on a
	// loaded machine).
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err = g.Load(ctx); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("blocklist: %w", err)
	}
	announcements := persistence.NewGate(a.bg).Subscribe(bg.ctx)
	bg.Go(func(ctx context.Context) {
		defer announcements.Close()
		g.Run(ctx, announcements)
	})
	return g, nil
}

// logConnected writes the one start-up line that says what this node
// talks to, with no password or token in it: an operator checks it
// against what was meant (the full, masked configuration is logged
// before).
func (a *app) logConnected(redisAddr string) {
	mode := "real"
	if a.cfg.Embedded() {
		mode = "embedded"
	}
	database := a.cfg.SQLitePath // embedded SQLite: a file name
	if a.cfg.DatabaseURL != "" {
		database = dbHostAndName(a.cfg.DatabaseURL)
	}
	a.log.Info("connected",
		"mode", mode,
		"node_id", a.cfg.NodeID,
		"http_addr", a.listener.Addr().String(),
		"redis", redisAddr,
		"database", database,
		"lock_nodes", len(a.cfg.LockRedisURLs),
		"cluster_provider", a.cfg.ClusterProvider,
	)
}

// dbHostAndName is "host:port/name" of a database URL: never its user's
// password, nor any query parameter (sslpassword, password).
func dbHostAndName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	return u.Host + u.Path
}

// serve runs the HTTP server until ctx is cancelled, then shuts down (see
// shutdown).
func (a *app) serve(ctx context.Context) error {
	a.log.Info("listening", "addr", a.listener.Addr().String(), "playground", "http://"+displayAddr(a.listener.Addr())+"/")
	errc := make(chan error, 1)
	go func() { errc <- a.http.Serve(a.listener) }()
	var err error
	select {
	case err = <-errc:
		a.stop()
	case <-ctx.Done():
		err = a.shutdown()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// shutdown stops the node without losing an answered grab or an accepted
// order, in this order, each step bounded:
//
//  1. /readyz answers 503, and with HTTP_DRAIN_DELAY the node keeps
//     serving that long, so that load balancers stop sending first;
//  2. the listener closes and open requests finish, grabs among them
//     (HTTP_SHUTDOWN_TIMEOUT); their contexts are not cancelled, so a
//     grab waiting in a voucher's mailbox is sold or refused, not cut off;
//  3. the router takes no new grab (one over a websocket is answered
//     UNAVAILABLE) and its actors answer what they hold (GRAB_TIMEOUT);
//  4. the order writer commits what the sale put in the order log
//     (ORDER_LOG_DRAIN_TIMEOUT; what is left waits for another node or
//     the next start, except in embedded mode, where it is lost);
//  5. websockets are closed (closeWebsockets);
//  6. stop runs the start order backwards: each step's loops end and
//     what it holds is released, the HTTP side first, the database last.
//
// One line at the end says what the node answered and stored since it
// started, and how much of it during the drain.
func (a *app) shutdown() error {
	began := time.Now()
	inFlight, _ := a.router.Load()
	answered, persisted := a.router.Answered(), a.writer.Persisted()
	a.ready.Drain()
	if d := a.cfg.HTTPDrainDelay; d > 0 {
		a.log.Info("draining", "delay", d)
		time.Sleep(d)
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), a.cfg.HTTPShutdownTimeout)
	err := a.http.Shutdown(shutCtx)
	cancel()
	if err != nil {
		a.log.Warn("open requests cut off at shutdown", "timeout", a.cfg.HTTPShutdownTimeout, "err", err)
	}
	a.router.Drain()
	drained := a.drainOrderLog()
	websockets := a.closeWebsockets()
	a.stop()
	// The totals are since start (the counters are this process's); the
	// _at_shutdown ones what the drain itself answered and stored, 0 for a
	// node stopped while idle.
	attrs := []any{
		"grabs_in_flight", inFlight,
		"grabs_answered", a.router.Answered(),
		"grabs_answered_at_shutdown", a.router.Answered() - answered,
		"orders_persisted", a.writer.Persisted(),
		"orders_persisted_at_shutdown", a.writer.Persisted() - persisted,
		"order_log_drained", drained,
		"duration", time.Since(began).Round(time.Millisecond),
	}
	if a.redPkts != nil {
		attrs = append(attrs, "red_packet_grabs_persisted", a.redPkts.writer.Persisted())
	}
	if websockets >= 0 {
		attrs = append(attrs, "websockets_closed", websockets)
	}
	a.log.Info("shut down", attrs...)
	return err
}

// drainOrderLog waits, up to ORDER_LOG_DRAIN_TIMEOUT, until the order
// writer has committed every accepted order, and reports whether it did.
func (a *app) drainOrderLog() bool {
	if a.writer == nil { // the start failed before the writer ran
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.OrderLogDrainTimeout)
	defer cancel()
	if err := a.writer.WaitDrained(ctx); err != nil {
		a.log.Warn("orders still in the order log at shutdown; another node or the next start persists them", "err", err)
		return false
	}
	if a.redPkts != nil {
		if err := a.redPkts.writer.WaitDrained(ctx); err != nil {
			a.log.Warn("red-packet grabs still in their order logs at shutdown; another node or the next start persists them", "err", err)
			return false
		}
	}
	return true
}

// stop releases what start acquired: it runs the start order backwards,
// each step after its loops have ended. After shutdown it only stops and
// closes (the grabs are answered and the order log drained already);
// after a failed start or a failed server it first drains as well as it
// can. Safe to repeat.
func (a *app) stop() {
	if a.started == nil {
		return
	}
	if a.ready == nil || !a.ready.Draining() { // not drained by shutdown: a failed start or server
		a.closeListener()
		if a.router != nil {
			a.router.Drain()
		}
		a.drainOrderLog()
	}
	a.end()
}

// breakerProbeInterval is how often a node whose breaker is not closed
// pings Redis to find it back.
const breakerProbeInterval = 100 * time.Millisecond

// afterRedisOutage runs when the breaker closes again, before grabs use
// Redis: with the database fallback it waits for the database grabs under
// way, then re-syncs from the database every voucher the fallback sold
// (Redis's load does not know those sales); then every actor reloads what
// it cached. An error keeps grabs off Redis and is retried.
func (a *app) afterRedisOutage(ctx context.Context) error {
	if a.cfg.DegradeToDB {
		a.fallback.Barrier()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := a.catalog.ResyncDBSold(ctx); err != nil {
			return err
		}
	}
	// Status changes made while Redis was down are copied before grabs use
	// it again; a failure here is left to the status sync (every
	// STATUS_SYNC_INTERVAL) rather than keeping grabs off Redis.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := a.catalog.SyncStatuses(sctx); err != nil {
		a.log.Warn("voucher statuses not all copied to redis after the outage; the status sync retries", "err", err)
	}
	cancel()
	a.router.Resync()
	a.rewarm(ctx)
	a.log.Info("redis is back; grabs use it again")
	return nil
}

// rewarm rebuilds, in the background, every live voucher Redis no
// longer holds verified (a restart, a failover, a flush, evictions:
// catalog.PreheatStale), and their holds begin, now rather than at each
// one's next grab, so that a buyer who asks again a moment later finds
// the voucher selling, not a hold just begun. A load still verified costs
// one Redis call. One run at a time; a failure leaves a voucher to its
// next grab.
func (a *app) rewarm(context.Context) {
	pctx := a.rewarmCtx.Load()
	if a.warmer == nil || pctx == nil {
		return
	}
	// A change seen while a run is under way (another shard's circuit
	// closing) is served by one more run after it, not dropped.
	a.rewarmAgain.Store(true)
	if !a.rewarming.CompareAndSwap(false, true) {
		return
	}
	ctx := *pctx
	a.rewarms.Add(1)
	go func() {
		defer a.rewarms.Done()
		for {
			for a.rewarmAgain.Swap(false) && ctx.Err() == nil {
				a.rewarmOnce(ctx)
			}
			a.rewarming.Store(false)
			// A trigger between the last Swap and the Store found the run
			// still on and left it to this one.
			if !a.rewarmAgain.Load() || ctx.Err() != nil || !a.rewarming.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// rewarmOnce is one run of rewarm: the stale vouchers, rebuilt.
func (a *app) rewarmOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := a.warmer.PreheatStale(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		a.log.Warn("live vouchers not all reloaded after redis changed; the rest reload at their next grab", "reloaded", n, "err", err)
	case n > 0:
		a.log.Info("live vouchers reloaded after redis changed", "vouchers", n)
	}
}

// displayAddr turns a listen address into one a browser can open.
func displayAddr(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// logConsumerOptions are the settings the order and red-packet writers
// share. ORDER_LOG_LINGER=0 is held as config.Off, the options' "no
// wait" (their zero takes the default).
func logConsumerOptions(cfg config.Config) writer.Options {
	return writer.Options{Consumer: cfg.NodeID, ClaimIdle: cfg.OrderLogClaimIdle, Linger: cfg.OrderLogLinger}
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
