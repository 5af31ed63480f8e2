package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	rdb      *redis.Client
	bg       *redis.Client
	breaker  *persistence.Breaker
	fallback *persistence.DBGrabs // DEGRADE_TO_DB only
	probe    *redis.Client        // /readyz's own client, with short timeouts
	ready    *readiness
	tokens   *auth.Tokens
	catalog  *catalog.Service
	ids      *persistence.OrderIDs
	router   *actors.Router
	writer   *persistence.OrderWriter
	orders   *ordersPart
	live     *live.Service
	listener net.Listener
	http     *http.Server
	// cancelRequests ends every request's context (websockets get their
	// close frame); serve calls it once draining is over, not when the
	// shutdown starts, so requests served while draining still complete.
	cancelRequests context.CancelFunc

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

	redisOpts := &redis.Options{}
	if cfg.RedisURL == "" {
		if a.mini, err = miniredis.Run(); err != nil {
			return nil, fmt.Errorf("start embedded redis: %w", err)
		}
		redisOpts.Addr = a.mini.Addr()
	} else {
		redisOpts, _ = redis.ParseURL(cfg.RedisURL) // validated by config
	}
	a.bg = redis.NewClient(persistence.BackgroundClientOptions(*redisOpts))
	a.rdb = redis.NewClient(persistence.RequestClientOptions(*redisOpts, 0))
	a.breaker = persistence.NewBreaker(log, persistence.BreakerOptions{OnClose: a.afterRedisOutage})
	a.rdb.AddHook(a.breaker)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = a.bg.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return nil, &config.Error{Var: "REDIS_URL", Msg: "cannot reach redis: " + err.Error()}
	}
	if cfg.RedisURL != "" {
		checkRedisDurability(ctx, a.bg, log)
	}

	// /readyz pings through a client of its own: the shared one waits
	// seconds for a stalled Redis, and its pool may be busy with grabs.
	probeOpts := *redisOpts
	probeOpts.DialTimeout, probeOpts.ReadTimeout, probeOpts.WriteTimeout = readyTimeout, readyTimeout, readyTimeout
	probeOpts.PoolTimeout, probeOpts.PoolSize, probeOpts.MinIdleConns = readyTimeout, 2, 0
	probeOpts.MaxRetries, probeOpts.ContextTimeoutEnabled = -1, true
	a.probe = redis.NewClient(&probeOpts)
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
	a.catalog = catalog.New(persistence.NewVouchers(a.db), stock, log)
	n, err := a.catalog.PreheatAll(ctx)
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

	limits := persistence.NewRateLimits(a.rdb, cfg.RateUserPerSec, cfg.RateVoucherPerSec, cfg.RateIPPerSec)
	routerOpts := actors.Options{
		Limits:      limits,
		BatchSize:   cfg.GrabBatchSize,
		QueueBound:  cfg.GrabQueueBound,
		GrabTimeout: cfg.GrabTimeout,
		Redis:       a.breaker,
	}
	if cfg.DegradeToDB {
		a.fallback = persistence.NewDBGrabs(a.db, a.breaker, 0)
		routerOpts.Fallback = a.fallback
	}
	// a.live is set below, before the server takes any grab.
	routerOpts.Sold = func(voucherID int64) { a.live.Sold(voucherID) }
	a.router = actors.NewRouter(persistence.NewGrabs(a.rdb), a.ids, a.catalog, log, routerOpts)
	a.writer = persistence.NewOrderWriter(a.db, a.bg, log, persistence.OrderWriterOptions{Consumer: cfg.NodeID, ClaimIdle: cfg.OrderLogClaimIdle})
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

	if a.orders, err = a.startOrders(bg, stock); err != nil {
		return nil, err
	}
	a.live = a.startLive(bg)
	gql := graph.NewHandler(&graph.Resolver{Catalog: a.catalog, Grabber: a.router, DeadLetters: persistence.NewDeadLetters(a.db), Reconciler: persistence.NewReconciler(a.db, a.rdb),
		Orders: a.orders.service, Reconciliations: a.orders.reconciler, Live: a.live}, graph.HandlerOptions{
		Tokens:                 a.tokens,
		Log:                    log,
		IPLimit:                limits,
		FloodPerSec:            cfg.ShedIPPerSec,
		Shed:                   graph.LoadShedding{Gauge: a.router, QueueDepth: cfg.ShedQueueDepth, GrabLatency: cfg.ShedGrabLatency},
		Introspection:          cfg.Introspection,
		Limits:                 graph.Limits{MaxAnswerBytes: int64(cfg.MaxResponseBytes)},
		WebsocketMaxOperations: cfg.WSMaxOperations,
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
	requests, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	a.cancelRequests = cancelRequests
	a.http = &http.Server{
		Handler:           withDeadlines(mux, cfg.HTTPBodyTimeout, cfg.HTTPWriteTimeout),
		ReadHeaderTimeout: cfg.HTTPHeaderTimeout,
		// Also set per request by withDeadlines (and lifted for
		// websockets); here it covers what net/http answers itself.
		WriteTimeout: cfg.HTTPWriteTimeout,
		IdleTimeout:  2 * time.Minute,
		BaseContext:  func(net.Listener) context.Context { return requests },
	}
	return a, nil
}

// serve runs the HTTP server until ctx is cancelled, then shuts down,
// giving open requests HTTP_SHUTDOWN_TIMEOUT.
func (a *app) serve(ctx context.Context) error {
	a.log.Info("listening", "addr", a.listener.Addr().String(), "playground", "http://"+displayAddr(a.listener.Addr())+"/")
	errc := make(chan error, 1)
	go func() { errc <- a.http.Serve(a.listener) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		// Not ready from now on; with HTTP_DRAIN_DELAY the node keeps
		// serving that long so load balancers see it and stop sending.
		a.ready.draining.Store(true)
		if d := a.cfg.HTTPDrainDelay; d > 0 {
			a.log.Info("draining", "delay", d.String())
			time.Sleep(d)
		}
		a.cancelRequests()
		shutCtx, cancel := context.WithTimeout(context.Background(), a.cfg.HTTPShutdownTimeout)
		err = a.http.Shutdown(shutCtx)
		cancel()
	}
	a.stop()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// stop releases what start acquired, in reverse order. Grabs already
// queued are answered (GRAB_TIMEOUT at most), and accepted orders still in
// the order log are given ORDER_LOG_DRAIN_TIMEOUT to reach the database (in
// the embedded mode the log lives in this process and would be lost).
func (a *app) stop() {
	if a.cancelRequests != nil {
		a.cancelRequests()
	}
	if a.listener != nil { // Shutdown closed it already if serve ran; a second Close is harmless
		_ = a.listener.Close()
	}
	if a.router != nil {
		a.router.Close()
	}
	if a.ids != nil {
		a.ids.Close() // after the router: no grab takes ids any more
	}
	if a.cancelBackground != nil {
		drainCtx, cancel := context.WithTimeout(context.Background(), a.cfg.OrderLogDrainTimeout)
		if err := a.writer.WaitDrained(drainCtx); err != nil {
			a.log.Warn("orders still in the order log at shutdown; another node or the next start persists them", "err", err)
		}
		cancel()
		a.cancelBackground()
		a.background.Wait()
		a.orders.wait()
	}
	if a.probe != nil {
		_ = a.probe.Close()
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
func (a *app) afterRedisOutage() error {
	if a.cfg.DegradeToDB {
		a.fallback.Barrier()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.catalog.ResyncDBSold(ctx); err != nil {
			return err
		}
	}
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
