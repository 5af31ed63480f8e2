package node

import (
	"cmp"
	"context"
	"net"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"flashsale/config"
	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/httpapi/console"
	"flashsale/httpapi/playground"
	"flashsale/internal/connlimit"
	"flashsale/persistence"
	"flashsale/usecase/seckill"
)

// The HTTP side of the node: GraphQL over everything built before it, the
// listener, the server. None of it runs a goroutine before serve.

// buildHandler builds /query and every route over the parts built before.
func (a *app) buildHandler(context.Context) error {
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
		Traces:      a.tracerProvider(),
	}
	// The budget's defaults are the handler's (httpapi), its store persistence.
	budget, restore := cmp.Or(cfg.CostBudget, httpapi.CostBudgetDefault), cmp.Or(cfg.CostRestorePerSec, httpapi.CostRestorePerSecDefault)
	if b := persistence.NewCostBudgets(a.rdb, budget, restore); b != nil {
		opts.Budget = b
	}
	if a.hooks.HTTP != nil {
		a.hooks.HTTP(&opts)
	}
	gql := httpapi.NewHandler(&graph.Resolver{Catalog: a.catalog, Seckill: seckill.New(a.gate, grabber).WithRecorder(a.saleStats), DeadLetters: persistence.NewDeadLetters(a.db), Reconciler: reconciliationQuery{a.orders.reconciler},
		Orders: a.orders.service, Reconciliations: a.orders.reconciler, Live: a.live, Gate: a.gate, RedPackets: a.redPkts.service, Queue: a.queue,
		SaleStats: a.saleStats, Nodes: a.nodes}, opts)
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
		// The operators' console, a client of /query.
		Console:       console.Handler("/query"),
		ConsoleAssets: console.Assets(),
		Ready:         a.ready,
		Metrics:       promhttp.Handler(),
		Hosts:         a.hosts,
	})
	return nil
}

// listen binds HTTP_ADDR, behind the per-address admission of new
// connections.
func (a *app) listen(context.Context) (err error) {
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

// buildServer builds the HTTP server, which serves once serve runs; its
// requests' contexts end at endRequests.
func (a *app) buildServer(ctx context.Context) error {
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
