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

	"flashsale/internal/config"
)

// Node is one started node: its stores are open, its background work
// runs and its listener is bound, but it serves HTTP only once Run is
// called.
type Node struct{ a *app }

// New builds and starts a node from cfg; on an error what was started is
// stopped again.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*Node, error) {
	a, err := start(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	return &Node{a: a}, nil
}

// PrintDemo creates the demo vouchers if there are none and prints the
// embedded mode's banner (tokens and first operations) on w.
func (n *Node) PrintDemo(ctx context.Context, w io.Writer) error { return n.a.printDemo(ctx, w) }

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
		if err := n.PrintDemo(ctx, stdout); err != nil {
			n.Stop()
			return err
		}
	}
	return n.Run(ctx)
}
