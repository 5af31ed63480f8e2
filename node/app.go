package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/config"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/internal/breaker"
	"flashsale/internal/lease"
	"flashsale/internal/lifecycle"
	"flashsale/internal/maintenance"
	"flashsale/persistence"
	"flashsale/usecase/catalog"
	"flashsale/usecase/gate"
	"flashsale/usecase/live"
	"flashsale/usecase/queue"
	"flashsale/usecase/salestats"
)

// app is the wired service. start builds it from one ordered list of
// services (services, below): database, Redis, stores, services, actors,
// GraphQL, HTTP; stop stops them in the reverse order.
type app struct {
	cfg   config.Config
	log   *slog.Logger
	hooks Hooks // zero in production
	// listening, when set, runs once the node listens, after its
	// start-up lines (the embedded mode's banner).
	listening func()
	db        *bun.DB
	mini      *miniredis.Miniredis // embedded mode only
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
	router   *actors.Router
	writer   *writer.Writer // the order writer, set once it runs
	wakers   writerWaker    // every log writer, woken when Redis is back
	orders   *ordersPart
	locks    lockPart
	redPkts  *redPacketsPart
	live     *live.Service
	queue    *queue.Service
	// saleStats counts the grabs for the console's live sale figures.
	saleStats *salestats.Service
	// nodes keeps the nodes' statuses for the console's cluster view.
	nodes   *persistence.NodeStatuses
	gate    *gate.Service
	gateRdb redis.UniversalClient // the gate's own client, with Hooks.GateRedis only
	gql     http.Handler          // /query
	routes  http.Handler          // every route, behind hosts in embedded mode (httpapi.Routes)
	// hosts, in embedded mode, refuses requests to other Hosts than this
	// machine's (DNS rebinding); nil in real mode.
	hosts *httpapi.LocalHosts
	// warmer preheats every live voucher through the background client:
	// at start, and again when Redis may have lost loads (rewarm, run by
	// the breaker watch).
	warmer   *catalog.Service
	rewarm   rewarmer
	listener net.Listener
	http     *http.Server
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

	// parts are the services of services(), started in order; stop
	// stops them from the last.
	parts *lifecycle.Group

	// traces is the tracer provider of the OTEL_* settings; nil when
	// they ask for none (node/tracing.go).
	traces *traces
}

// Every background part is a lifecycle service, started by services'
// list and stopped by it.
var (
	_ lifecycle.Service = (*actors.Router)(nil)
	_ lifecycle.Service = (*writer.Writer)(nil)
	_ lifecycle.Service = (*lease.Keeper)(nil)
	_ lifecycle.Service = (*maintenance.Job[bool])(nil)
	_ lifecycle.Service = (*catalog.StatusSync)(nil)
	_ lifecycle.Service = (*breakerWatch)(nil)
	_ lifecycle.Service = (*rewarmer)(nil)
	_ lifecycle.Service = (*follower)(nil)
	_ lifecycle.Service = (*profiler)(nil)
	_ lifecycle.Service = (*ordersPart)(nil)
	_ lifecycle.Service = (*redPacketsPart)(nil)
)

// services is the node's start order: every part, by name, each line
// with why it stands where it does. Stop runs it backwards: what a part
// uses stops after it. The parts are built in the *_wiring.go files.
func (a *app) services() []lifecycle.Named {
	return []lifecycle.Named{
		// First the port: a node that cannot listen (HTTP_ADDR taken)
		// fails before it migrates, leases or loads anything. Nothing is
		// served on it until run calls serve, once everything is built;
		// connections that arrive before wait in the backlog.
		{Name: "listener", Service: lifecycle.Func(a.listen, a.closeListener)},
		// Then tracing, stopped next to last: every client built after it
		// is traced (OTEL_*), and its spans are exported once all stopped.
		{Name: "tracing", Service: lifecycle.Func(a.openTracing, a.closeTracing)},
		// Then the database: every other step reads or writes the schema,
		// and the order ids and the fallback live in it.
		{Name: "database", Service: lifecycle.Func(a.openDatabase, a.closeDatabase)},
		// Stock truth is Redis: an unreachable REDIS_URL stops the start
		// before anything is built on it.
		{Name: "redis", Service: lifecycle.Func(a.openRedis, a.closeRedis)},
		// /readyz answers from its own client, built beside the others.
		{Name: "readiness", Service: lifecycle.Func(a.openReadiness, a.closeReadiness)},
		// The tokens need the secret, which embedded mode keeps beside
		// its database file.
		{Name: "tokens", Service: lifecycle.Func(a.openTokens, nil)},
		// Every live voucher is in Redis before an actor asks for one.
		{Name: "catalog", Service: lifecycle.Build(a.buildCatalog)},
		// Order ids come from a node slot leased in the database; the
		// router and the red packets take ids, so it closes after them.
		{Name: "order ids", Service: lifecycle.Build(a.buildOrderIDs)},
		// The Redlock: segment leases of the actors and the singletons of
		// the maintenance, released after both stopped.
		{Name: "locks", Service: lifecycle.Func(a.openLocks, a.locks.close)},
		// Orders after the sale: pay timeout, sweeper, reconciliation.
		{Name: "orders", Service: lifecycle.Build(a.buildOrders)},
		// Live stock needs the orders' service; the router's sales reach
		// it (Sold), and no grab is taken before HTTP.
		{Name: "live", Service: lifecycle.Build(a.buildLive)},
		// The sequencers: they take the leases and the ids above, and
		// tell live stock what they sold.
		{Name: "router", Service: lifecycle.Build(a.buildRouter)},
		// The breaker's probe and its re-sync after an outage use the
		// router: closed before it.
		{Name: "breaker watch", Service: lifecycle.Build(a.buildBreakerWatch)},
		// The order writer persists what the router's grabs log; the
		// shutdown drains it while the router still answers.
		{Name: "order writer", Service: lifecycle.Build(a.buildOrderWriter)},
		// Voucher events (pause, restock, ...) reach the router's actors.
		{Name: "voucher events", Service: lifecycle.Build(a.buildVoucherEvents)},
		// Status changes Redis missed are copied by every node.
		{Name: "status sync", Service: lifecycle.Build(a.buildStatusSync)},
		// Red packets need the router's actor system and the orders' lock.
		{Name: "red packets", Service: lifecycle.Build(a.buildRedPackets)},
		// The gate loads its blocklist before the first grab.
		{Name: "gate", Service: lifecycle.Build(a.buildGate)},
		// The waiting rooms check joins at the gate and issue its
		// tickets; their pacer admits from every open room.
		{Name: "waiting rooms", Service: lifecycle.Build(a.buildQueue)},
		// The console's sale figures: counted by the grabs GraphQL takes,
		// added to the cluster's once a second until the grabs stopped;
		// the nodes' statuses are read by GraphQL too.
		{Name: "sale figures", Service: lifecycle.Build(a.buildSaleStats)},
		// GraphQL over everything above.
		{Name: "graphql", Service: lifecycle.Func(a.buildHandler, nil)},
		// A cluster member is sent grabs by the others as soon as it
		// joins: it joins once everything a grab reaches is built
		// (leaving is the router's stop).
		{Name: "cluster", Service: lifecycle.Func(a.joinCluster, nil)},
		// The console's cluster view: the node reports itself, its port
		// and membership included, once a second.
		{Name: "node status", Service: lifecycle.Build(a.buildNodeStatus)},
		// The profiler listens on its own private address.
		{Name: "profiler", Service: lifecycle.Build(func(context.Context) (lifecycle.Service, error) {
			return newProfiler(a.cfg.PprofAddr, a.hosts, a.log), nil
		})},
		// The HTTP server serves once run calls serve; its requests'
		// contexts end first in stop, after the shutdown let them finish.
		{Name: "http", Service: lifecycle.Func(a.buildServer, a.endRequests)},
	}
}

func start(ctx context.Context, cfg config.Config, log *slog.Logger, hooks Hooks) (*app, error) {
	a := &app{cfg: cfg, log: log, hooks: hooks}
	a.parts = lifecycle.NewGroup(a.services()...)
	a.parts.Log = log // "start step failed", at debug level
	a.parts.BeforeStop = a.drainUnlessDrained
	// A failed start has stopped what started; its error is the failing
	// part's own (a configuration error reads as one), the part's name is
	// in the debug line.
	if err := a.parts.Start(ctx); err != nil {
		var failed *lifecycle.StartError
		if errors.As(err, &failed) {
			err = failed.Err
		}
		return nil, err
	}
	a.logConnected(a.target.String())
	return a, nil
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
	if a.listening != nil {
		a.listening()
	}
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
//  6. stop stops the services backwards: each one's goroutines end and
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

// stop releases what start acquired: it stops the services backwards,
// each after its goroutines have ended. After shutdown it only stops and
// closes (the grabs are answered and the order log drained already);
// after a failed start or a failed server it first drains as well as it
// can (drainUnlessDrained). Safe to repeat.
func (a *app) stop() {
	if a.parts != nil {
		a.parts.Stop()
	}
}

// drainUnlessDrained runs before the services stop: a node that the
// shutdown did not drain (a failed start or server) drains as well as it
// can while every started service still runs.
func (a *app) drainUnlessDrained() {
	if a.ready != nil && a.ready.Draining() {
		return
	}
	a.closeListener()
	if a.router != nil {
		a.router.Drain()
	}
	a.drainOrderLog()
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
