// Package node assembles one flash-sale node from its configuration:
// database, Redis, stores, services, actors, GraphQL and HTTP, started in
// one order and stopped in the reverse. The server runs it, and so do the
// process-level tests (through the binary or in-process), so that nothing
// wires the service a second time.
package node

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/config"
	"flashsale/httpapi"
	"flashsale/usecase/catalog"
	"flashsale/usecase/gate"
	"flashsale/usecase/seckill"
)

// Node is one started node: its stores are open, its background work
// runs and its listener is bound, but it serves HTTP only once Run is
// called.
type Node struct{ a *app }

// New builds and starts a node from cfg; on an error what was started is
// stopped again.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*Node, error) {
	return NewWith(ctx, cfg, log, Hooks{})
}

// Hooks are what a test changes in a node beyond its configuration; the
// zero Hooks is the production node. A setting that exists (REDIS_URL,
// DATABASE_URL, POW_DIFFICULTY, RATE_USER_PER_SEC, ...) is set in the
// configuration instead: a hook is only for what no setting can say.
type Hooks struct {
	// GrabClient, if set, is given the client the voucher grab scripts
	// would run on and returns the one they run on instead (a client the
	// test can stall, or one that counts the router's commands). The node
	// adds no hook to it and does not close it.
	GrabClient func(redis.UniversalClient) redis.UniversalClient
	// Actors, if set, changes the router's options after the node derived
	// them from the configuration (the call and batch deadlines, retries:
	// what a loaded test machine needs more room for).
	Actors func(*actors.Options)
	// GateRedis, if set, is added to a client the gate's request path has
	// to itself, so that a test can count what the gate asks Redis (its
	// pub/sub watcher keeps the background client).
	GateRedis redis.Hook
	// HTTP, if set, changes the /query handler's options after the node
	// derived them from the configuration: what no setting says (the
	// websocket ping and write deadlines, the introspection price limit)
	// or a stand-in the test controls (a per-IP limit that holds
	// requests).
	HTTP func(*httpapi.HandlerOptions)
	// Grabber, if set, is given the router the grab resolver would call
	// and returns the one it calls instead (a reference design a
	// benchmark compares the router with). The node's own router runs
	// all the same.
	Grabber func(seckill.Router) seckill.Router
}

// NewWith is New with hooks for tests.
func NewWith(ctx context.Context, cfg config.Config, log *slog.Logger, hooks Hooks) (*Node, error) {
	a, err := start(ctx, cfg, log, hooks)
	if err != nil {
		return nil, err
	}
	return &Node{a: a}, nil
}

// Parts are the pieces of a started node that tests drive or inspect
// directly, beside what they ask over HTTP.
type Parts struct {
	DB *bun.DB
	// GraphQL is the /query handler, with its request guard, admission
	// and shedding as configured: what a test sends operations to
	// without a listener.
	GraphQL http.Handler
	// Handler is everything the node serves (/query, /healthz, /readyz,
	// /metrics, the playground: httpapi.Routes), without the server's
	// deadlines (httpapi.NewServer adds them).
	Handler    http.Handler
	Catalog    *catalog.Service
	Router     *actors.Router
	Gate       *gate.Service
	Orders     *writer.Writer // the order log's writer
	RedPackets *writer.Writer // the red-packet logs' writer
}

// Parts returns the node's parts.
func (n *Node) Parts() Parts {
	a := n.a
	p := Parts{DB: a.db, GraphQL: a.gql, Handler: a.routes, Catalog: a.catalog, Router: a.router, Gate: a.gate, Orders: a.writer}
	if a.redPkts != nil {
		p.RedPackets = a.redPkts.writer
	}
	return p
}

// Demo creates the demo vouchers if there are none; Run then prints the
// embedded mode's banner (first operations, then the addresses and
// tokens) on w once it listens, after every start-up line.
func (n *Node) Demo(ctx context.Context, w io.Writer) error {
	ids, err := n.a.prepareDemo(ctx)
	if err != nil {
		return err
	}
	n.a.listening = func() {
		if err := n.a.printBanner(w, ids); err != nil {
			n.a.log.Warn("demo banner not printed", "err", err)
		}
	}
	return nil
}

// Run serves HTTP until ctx is cancelled, then shuts the node down without
// losing an answered grab; it returns once the node is stopped.
func (n *Node) Run(ctx context.Context) error { return n.a.serve(ctx) }

// Stop stops a node that is not running (Run stops its own); safe to
// repeat.
func (n *Node) Stop() { n.a.stop() }

// Serve is the service's life: it builds the node from cfg, prints the
// demo banner on stdout when DEMO is on, and serves until ctx is
// cancelled.
func Serve(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	n, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	if cfg.Demo {
		if err := n.Demo(ctx, stdout); err != nil {
			n.Stop()
			return err
		}
	}
	return n.Run(ctx)
}
