package node

import (
	"context"

	"flashsale/graph"
	"flashsale/internal/catalog"
	"flashsale/internal/lease"
	"flashsale/internal/orders"
	"flashsale/persistence"
)

var (
	_ graph.Orders          = (*orders.Service)(nil)
	_ graph.Reconciliations = (*orders.Reconciler)(nil)
	_ orders.Storer         = (*persistence.Orders)(nil)
	_ orders.ReconcileStore = (*persistence.Reconciler)(nil)
	_ orders.Unloader       = (*persistence.Stock)(nil)
	_ orders.Preheater      = (*catalog.Service)(nil)
	_ orders.StockReader    = (*catalog.Service)(nil)
	_ orders.Locker         = (*lease.Redlock)(nil)
)

// ordersPart is the wiring of orders after the sale: the order service,
// reconciliation and the three maintenance services (pay timeout,
// pending-stock sweeper, background reconciliation), each running under a
// Redlock lease over LOCK_REDIS_URLS (the stock Redis in the embedded
// mode).
type ordersPart struct {
	service    *orders.Service
	reconciler *orders.Reconciler
	// locker runs the cluster-wide singletons (red-packet refunds too).
	locker *lease.Redlock
	done   []<-chan struct{}
}

// startOrders wires the order services and starts their maintenance on bg;
// stopOrders waits for it after bg is cancelled.
func (a *app) startOrders(bg context.Context, stock *persistence.Stock) (*ordersPart, error) {
	p := &ordersPart{}
	locker := a.locks.redlock
	p.locker = locker
	store := persistence.NewOrders(a.db, a.rdb, a.log)
	p.service = orders.New(store, a.catalog, orders.Config{PayTimeout: a.cfg.PayTimeout}, a.log)
	p.reconciler = orders.NewReconciler(persistence.NewReconciler(a.db, a.rdb), stock, a.catalog, locker,
		orders.ReconcileConfig{Interval: a.cfg.ReconcileInterval}, a.log)
	p.done = append(p.done,
		orders.NewTimeouts(store, locker, orders.TimeoutConfig{PayTimeout: a.cfg.PayTimeout, Interval: a.cfg.PayTimeoutInterval}, a.log).Start(bg),
		orders.NewSweeper(store, locker, orders.SweepConfig{}, a.log).Start(bg),
		p.reconciler.Start(bg),
	)
	return p, nil
}

// wait waits for the maintenance services (their context is cancelled).
func (p *ordersPart) wait() {
	if p == nil {
		return
	}
	for _, d := range p.done {
		<-d
	}
}
