package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/graph"
	"flashsale/internal/auth"
	"flashsale/internal/catalog"
	"flashsale/internal/config"
	"flashsale/internal/gate"
	"flashsale/internal/live"
	"flashsale/internal/playground"
	"flashsale/persistence"
)

var (
	_ graph.Catalog        = (*catalog.Service)(nil)
	_ graph.Grabber        = (*actors.Router)(nil)
	_ actors.Preheater     = (*catalog.Service)(nil)
	_ actors.Store         = (*persistence.Grabs)(nil)
	_ actors.OrderIDs      = (*persistence.OrderIDs)(nil)
	_ actors.Limits        = (*persistence.RateLimits)(nil)
	_ actors.RedisHealth   = (*persistence.Breaker)(nil)
	_ actors.Fallback      = (*persistence.DBGrabs)(nil)
	_ catalog.VoucherStore = (*persistence.Vouchers)(nil)
	_ catalog.StockStore   = (*persistence.Stock)(nil)
	_ graph.IPLimiter      = (*persistence.RateLimits)(nil)
	_ graph.LoadGauge      = (*actors.Router)(nil)
	_ graph.DeadLetters    = (*persistence.DeadLetters)(nil)
	_ graph.Reconciler     = (*persistence.Reconciler)(nil)
	_ graph.Gate           = (*gate.Service)(nil)
	_ gate.Store           = (*persistence.Gate)(nil)
	_ gate.Vouchers        = (*persistence.Vouchers)(nil)
	_ gate.Watcher         = (*persistence.Gate)(nil)
)

// app is the wired service. start builds it in a visible order (database,
// Redis, services, GraphQL, HTTP); stop tears it down in reverse.
type app struct {
	cfg  config.Config
	log  *slog.Logger
	db   *bun.DB
	mini *miniredis.Miniredis // embedded mode only
	// rdb serves request paths (grabs, rate limits, stock reads): short
	// deadlines and the circuit breaker. bg serves the background loops
	// (order writer, event watcher), which retry with backoff on their own.
	rdb redis.UniversalClient
	bg  redis.UniversalClient
	// acked runs the grab scripts when replicas must acknowledge them
	// (REDIS_ACK_REPLICAS): the request path's client, with room in its
	// read deadline for WAIT; rdb otherwise.
	acked    redis.UniversalClient
	breaker  *persistence.Breaker
	fallback *persistence.DBGrabs  // DEGRADE_TO_DB only
	probe    redis.UniversalClient // /readyz's own client, with short timeouts
	ready    *readiness
	tokens   *auth.Tokens
	catalog  *catalog.Service
	ids      *persistence.OrderIDs
	router   *actors.Router
	writer   *persistence.OrderWriter
	orders   *ordersPart
	locks    lockPart
	redPkts  *redPacketsPart
	live     *live.Service
	gate     *gate.Service
	listener net.Listener
	http     *http.Server
	profiler *profiler // PPROF_ADDR only
	// cancelRequests ends every request's context; stop calls it last,
	// after the HTTP server has let its open requests finish.
	cancelRequests context.CancelFunc
	// closeWebsockets is the shutdown's slot for closing the websockets
	// (each gets its close frame), after the grabs are answered and the
	// order log is drained, before the actors stop. It returns how many it
	// closed, or -1 when it does not count them. Until the websocket hub
	// provides one it cancels the request contexts, which ends every
	// websocket's connection.
	closeWebsockets func() int

	// background runs the order writer and the voucher-event watcher;
	// stop cancels it and waits for them.
	cancelBackground context.CancelFunc
	background       sync.WaitGroup
}

func start(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *app, err error) {
	a := &app{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			a.stop()
		}
	}()

	dbURL := cfg.DatabaseURL
	if dbURL == "" {
		dbURL = cfg.SQLitePath
	}
	if a.db, err = persistence.Open(ctx, dbURL); err != nil {
		return nil, &config.Error{Var: "DATABASE_URL", Msg: "cannot use the database: " + err.Error()}
	}
	if err = persistence.Migrate(ctx, a.db); err != nil {
		return nil, fmt.Errorf("database schema: %w", err)
	}

	var target persistence.RedisTarget
	if cfg.RedisURL == "" {
		if a.mini, err = miniredis.Run(); err != nil {
			return nil, fmt.Errorf("start embedded redis: %w", err)
		}
		target = persistence.SingleTarget(redis.Options{Addr: a.mini.Addr()})
	} else if target, err = persistence.ParseRedisTarget(cfg.RedisMode, cfg.RedisURL); err != nil {
		return nil, &config.Error{Var: "REDIS_URL", Msg: err.Error()} // validated by config
	}
	// Every client of the stock Redis is built from the one target, so
	// each gets the same tuning in every REDIS_MODE.
	a.bg = target.Client(persistence.BackgroundTuning())
	a.rdb = target.Client(persistence.RequestTuning(0))
	a.breaker = persistence.NewBreaker(log, persistence.BreakerOptions{OnClose: a.afterRedisOutage})
	a.rdb.AddHook(a.breaker)
	// After the breaker: a command it refuses never reached Redis.
	a.rdb.AddHook(persistence.RedisErrors{})
	a.bg.AddHook(persistence.RedisErrors{})
	a.acked = a.rdb
	acks := persistence.Acks{Replicas: cfg.RedisAckReplicas, Timeout: cfg.RedisAckTimeout}
	if acks.Replicas > 0 {
		// A pipeline reads its replies under the client's read timeout,
		// WAIT's included: the grab scripts get a client whose timeout
		// leaves room for the acknowledgement, so that a slow replica is
		// an UNAVAILABLE batch, not a failed call that opens the breaker.
		tuning := persistence.RequestTuning(0)
		tuning.Read += acks.Timeout
		a.acked = target.Client(tuning)
		a.acked.AddHook(a.breaker)
		a.acked.AddHook(persistence.RedisErrors{})
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = a.bg.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return nil, &config.Error{Var: "REDIS_URL", Msg: "cannot reach redis: " + err.Error()}
	}
	checkRedisDurability(ctx, cfg, a.bg, log)

	// /readyz pings through a client of its own: the shared one waits
	// seconds for a stalled Redis, and its pool may be busy with grabs.
	a.probe = target.Client(persistence.ClientTuning{ContextTimeout: true,
		Dial: readyTimeout, Read: readyTimeout, Write: readyTimeout, Pool: readyTimeout,
		MaxRetries: -1, PoolSize: 2, MinIdleConns: 0})
	a.probe.AddHook(persistence.RedisErrors{})
	a.ready = &readiness{
		redis:    func(ctx context.Context) error { return a.probe.Ping(ctx).Err() },
		db:       a.db.PingContext,
		fallback: cfg.DegradeToDB,
	}

	secret := cfg.JWTSecret
	if secret == "" { // embedded mode only; config requires it otherwise
		if secret, err = auth.SecretFromFile(config.SecretPath(cfg.SQLitePath)); err != nil {
			return nil, &config.Error{Var: "JWT_SECRET", Msg: err.Error()}
		}
	}
	a.tokens = auth.NewTokens(secret, auth.WithMaxTTL(cfg.JWTMaxTTL))

	stock := persistence.NewStock(a.rdb)
	if a.mini != nil {
		// The embedded Redis lives and dies with this process, and so does
		// the only order writer that could hold orders of a lost load: a
		// reload has nobody to wait for (see persistence.ReloadHoldDefault).
		stock.ReloadHold = time.Millisecond
	}
	a.catalog = catalog.New(persistence.NewVouchers(a.db), stock, log)
	// The start-up preheat reads every live voucher through the background
	// client: a request's 200 ms deadline is for a shopper waiting, and a
	// busy Redis must not stop a node from starting.
	startStock := persistence.NewStock(a.bg)
	startStock.ReloadHold = stock.ReloadHold
	n, err := catalog.New(persistence.NewVouchers(a.db), startStock, log).PreheatAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("preheat vouchers: %w", err)
	}
	log.Info("seckill vouchers ready in redis", "vouchers", n)

	// Order ids come from a node slot leased in the database, not from
	// Redis: they must not repeat when Redis loses its data.
	a.ids = persistence.NewOrderIDs(a.db, log, persistence.OrderIDOptions{})
	if err = a.ids.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("order ids: %w", err)
	}

	limits := persistence.NewRateLimits(a.rdb, cfg.RateVoucherPerSec, cfg.RateIPPerSec)
	routerOpts := actors.Options{
		Limits:      limits,
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
	grabs := persistence.NewGrabs(a.acked)
	grabs.Acks = acks
	if cfg.DegradeToDB {
		a.fallback = persistence.NewDBGrabs(a.db, a.breaker, 0)
		routerOpts.Fallback = a.fallback
	}
	// a.live is set below, before the server takes any grab.
	routerOpts.Sold = func(voucherID int64) { a.live.Sold(voucherID) }
	if err = a.openLocks(); err != nil {
		return nil, err
	}
	routerOpts.Leases = segmentLeases{redlock: a.locks.redlock, ttl: cfg.SegmentLeaseTTL}
	routerOpts.LeaseWait = min(cfg.SegmentLeaseTTL+time.Second, max(cfg.GrabTimeout-time.Second, cfg.GrabTimeout/2))
	if cfg.ClusterProvider == "test" {
		// One node: plain local actors behind the same router, under the
		// same leases and fencing (docs/DECISIONS.md, "A single node is
		// not a cluster member").
		a.router = actors.NewRouter(grabs, a.ids, a.catalog, log, routerOpts)
	} else {
		co, err := clusterOptions(cfg)
		if err != nil {
			return nil, err
		}
		if a.router, err = actors.NewClusteredRouter(grabs, a.ids, a.catalog, log, routerOpts, co); err != nil {
			return nil, fmt.Errorf("cluster (%s): %w", clusterLabel(cfg), err)
		}
	}
	writerOpts := logConsumerOptions(cfg)
	writerOpts.Reclaim = func(ctx context.Context, fn func(context.Context) error) (bool, error) {
		return a.locks.redlock.Do(ctx, "order-log-reclaim", fn)
	}
	a.writer = persistence.NewOrderWriter(a.db, a.bg, log, writerOpts)
	if err = a.writer.Acquire(ctx); errors.Is(err, persistence.ErrConsumerInUse) {
		return nil, &config.Error{Var: "NODE_ID", Msg: err.Error() + "; give each node its own NODE_ID"}
	} else if err != nil {
		return nil, fmt.Errorf("order writer: %w", err)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancelBackground = cancel
	a.background.Add(3)
	go func() {
		defer a.background.Done()
		a.breaker.Watch(bg, breakerProbeInterval, func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() })
	}()
	go func() {
		defer a.background.Done()
		if err := a.writer.Run(bg); err != nil {
			log.Error("order writer stopped", "err", err)
		}
	}()
	go func() {
		defer a.background.Done()
		if err := persistence.NewStock(a.bg).Watch(bg, a.router.Changed, a.router.Resync); err != nil {
			log.Error("voucher-event watcher stopped", "err", err)
		}
	}()

	// Every node copies to Redis the status changes Redis missed (a pause
	// whose Redis write failed), so that the record wins within a bound.
	a.background.Add(1)
	go func() {
		defer a.background.Done()
		<-catalog.NewStatusSync(a.catalog, cfg.StatusSyncInterval, log).Start(bg)
	}()

	if a.orders, err = a.startOrders(bg, stock); err != nil {
		return nil, err
	}
	if a.redPkts, err = a.startRedPackets(ctx, bg); err != nil {
		return nil, err
	}
	a.live = a.startLive(bg)
	if a.gate, err = a.startGate(ctx, bg, secret); err != nil {
		return nil, err
	}
	gql := graph.NewHandler(&graph.Resolver{Catalog: a.catalog, Grabber: a.router, DeadLetters: persistence.NewDeadLetters(a.db), Reconciler: persistence.NewReconciler(a.db, a.rdb),
		Orders: a.orders.service, Reconciliations: a.orders.reconciler, Live: a.live, Gate: a.gate, RedPackets: a.redPkts.service}, graph.HandlerOptions{
		Tokens:                 a.tokens,
		Log:                    log,
		IPLimit:                limits,
		FloodPerSec:            cfg.ShedIPPerSec,
		Anonymous:              graph.AnonymousBudget{InFlight: cfg.AnonMaxInFlight, PerSecond: cfg.AnonPerSec, Wait: cfg.AnonWait},
		Shed:                   graph.LoadShedding{Gauge: a.router, QueueDepth: cfg.ShedQueueDepth, GrabLatency: cfg.ShedGrabLatency},
		Introspection:          cfg.Introspection,
		CompiledGrabs:          cfg.CompiledGrabs,
		Limits:                 graph.Limits{MaxAnswerBytes: int64(cfg.MaxResponseBytes)},
		WebsocketMaxOperations: cfg.WSMaxOperations,
		WebsocketMaxPerUser:    cfg.WSMaxPerUser,
		WebsocketMaxPerIP:      cfg.WSMaxPerIP,
	})
	mux := http.NewServeMux()
	mux.Handle("/query", gql)
	pgOpts, err := playgroundOptions(cfg, a.tokens)
	if err != nil {
		return nil, err
	}
	mux.Handle("GET /{$}", playground.Handler("flashsale", "/query", pgOpts...))
	mux.Handle("GET "+playground.AssetsPath, playground.Assets())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /readyz", a.ready)
	mux.Handle("GET /metrics", promhttp.Handler())

	if a.listener, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, &config.Error{Var: "HTTP_ADDR", Msg: err.Error()}
	}
	if a.profiler, err = startProfiler(cfg.PprofAddr, a.log); err != nil {
		return nil, err
	}
	requests, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	a.cancelRequests = cancelRequests
	a.closeWebsockets = func() int { cancelRequests(); return -1 }
	a.http = &http.Server{
		Handler:           withDeadlines(mux, cfg.HTTPBodyTimeout, cfg.HTTPWriteTimeout),
		ReadHeaderTimeout: cfg.HTTPHeaderTimeout,
		MaxHeaderBytes:    cfg.HTTPMaxHeaderBytes,
		// Also set per request by withDeadlines (and lifted for
		// websockets); here it covers what net/http answers itself.
		WriteTimeout: cfg.HTTPWriteTimeout,
		IdleTimeout:  2 * time.Minute,
		BaseContext:  func(net.Listener) context.Context { return requests },
	}
	a.logConnected(target.String())
	return a, nil
}

// startGate wires the grab gate against bots and scalpers and runs its
// refresh in the background. Its key is TICKET_SECRET, or derived from the
// JWT secret, which every node shares: a ticket from one node holds on
// every other.
func (a *app) startGate(ctx, bg context.Context, jwtSecret string) (*gate.Service, error) {
	key := gate.KeyFrom(jwtSecret)
	if a.cfg.TicketSecret != "" {
		key = []byte(a.cfg.TicketSecret)
	}
	g := gate.New(persistence.NewGate(a.rdb), persistence.NewVouchers(a.db), a.log, gate.Options{
		Key:           key,
		ReleaseBefore: a.cfg.TicketReleaseBefore,
		TicketTTL:     a.cfg.TicketTTL,
		ChallengeTTL:  a.cfg.ChallengeTTL,
		Difficulty:    a.cfg.PowDifficulty,
		Refresh:       a.cfg.GateRefresh,
	})
	if err := g.Load(ctx); err != nil {
		return nil, fmt.Errorf("blocklist: %w", err)
	}
	a.background.Add(1)
	go func() {
		defer a.background.Done()
		g.Run(bg, persistence.NewGate(a.bg))
	}()
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
//  6. the actors stop, the background loops end, the stores close.
//
// One line at the end says what the node answered and stored since it
// started, and how much of it during the drain.
func (a *app) shutdown() error {
	began := time.Now()
	inFlight, _ := a.router.Load()
	answered, persisted := a.router.Answered(), a.writer.Persisted()
	a.ready.draining.Store(true)
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
	if a.writer == nil || a.cancelBackground == nil {
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

// stop releases what start acquired, in reverse order; after shutdown it
// only stops and closes (the grabs are answered and the order log drained
// already), after a failed start or a failed server it drains as well as
// it can. Each step is safe to repeat.
func (a *app) stop() {
	if a.listener != nil { // Shutdown closed it already if serve ran; a second Close is harmless
		_ = a.listener.Close()
	}
	a.profiler.close()
	if a.router != nil {
		a.router.Drain()
	}
	if a.ids != nil {
		a.ids.Close() // after the router drained: no grab takes ids any more
	}
	if a.cancelBackground != nil && a.ready != nil && !a.ready.draining.Load() {
		a.drainOrderLog() // not drained by shutdown: a failed start or server
	}
	if a.cancelRequests != nil {
		a.cancelRequests()
	}
	if a.breaker != nil {
		a.breaker.Close() // a re-sync after an outage uses the router and the database
	}
	if a.router != nil {
		a.router.Close()
	}
	if a.cancelBackground != nil {
		a.cancelBackground()
		a.background.Wait()
		a.redPkts.wait() // before the orders close the lock clients
		a.orders.wait()
	}
	a.locks.close() // after the router and the maintenance: their leases are released
	if a.probe != nil {
		_ = a.probe.Close()
	}
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
	if a.db != nil {
		_ = a.db.Close()
	}
}

// breakerProbeInterval is how often a node whose breaker is not closed
// pings Redis to find it back.
const breakerProbeInterval = 250 * time.Millisecond

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
	a.log.Info("redis is back; grabs use it again")
	return nil
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
// share. ORDER_LOG_LINGER=0 means no wait, which the options spell as a
// negative linger (their zero takes the default).
func logConsumerOptions(cfg config.Config) persistence.LogConsumerOptions {
	o := persistence.LogConsumerOptions{Consumer: cfg.NodeID, ClaimIdle: cfg.OrderLogClaimIdle, Linger: cfg.OrderLogLinger}
	if o.Linger == 0 {
		o.Linger = -1
	}
	return o
}
