package node

import (
	"context"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/internal/catalog"
	"flashsale/internal/lease"
	"flashsale/internal/lifecycle"
	"flashsale/internal/maintenance"
	"flashsale/internal/orders"
	"flashsale/persistence"
)

var (
	_ graph.Orders          = (*orders.Service)(nil)
	_ graph.Reconciliations = (*orders.Reconciler)(nil)
	_ orders.Storer         = (*persistence.Orders)(nil)
	_ orders.ReconcileStore = (*persistence.Reconciliations)(nil)
	_ orders.Unloader       = (*persistence.Stock)(nil)
	_ orders.Preheater      = (*catalog.Service)(nil)
	_ orders.StockReader    = (*catalog.Service)(nil)
	_ maintenance.Locker    = (*lease.Redlock)(nil)
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
	// jobs are started in this order and stopped in reverse.
	jobs []lifecycle.Service
}

// startOrders wires the order services and starts their maintenance on bg;
// stop stops it.
func (a *app) startOrders(bg context.Context, stock *persistence.Stock) (*ordersPart, error) {
	p := &ordersPart{}
	locker := a.locks.redlock
	p.locker = locker
	store := persistence.NewOrders(a.db, a.rdb, a.log)
	p.service = orders.New(store, a.catalog, orders.Config{PayTimeout: a.cfg.PayTimeout}, a.log)
	p.reconciler = orders.NewReconciler(persistence.NewReconciliations(a.db, a.rdb), stock, a.catalog, locker,
		orders.ReconcileConfig{Interval: a.cfg.ReconcileInterval}, a.log)
	for _, job := range []lifecycle.Service{
		orders.NewTimeouts(store, locker, orders.TimeoutConfig{PayTimeout: a.cfg.PayTimeout, Interval: a.cfg.PayTimeoutInterval}, a.log),
		orders.NewSweeper(store, locker, orders.SweepConfig{}, a.log),
		p.reconciler,
	} {
		if err := job.Start(bg); err != nil {
			return p, err // stop stops the jobs started
		}
		p.jobs = append(p.jobs, job)
	}
	return p, nil
}

// stop stops the maintenance jobs, in reverse order, each after its run
// under way returned.
func (p *ordersPart) stop() {
	if p == nil {
		return
	}
	for i := len(p.jobs) - 1; i >= 0; i-- {
		p.jobs[i].Stop()
	}
}

// reconciliationQuery serves the admin's reconciliation query (one
// voucher's identity, as it is) from the one reconciler, whose Reconcile
// is the reconcile query's.
type reconciliationQuery struct{ r *orders.Reconciler }

var _ graph.Reconciler = reconciliationQuery{}

// Reconcile implements graph.Reconciler.
func (q reconciliationQuery) Reconcile(ctx context.Context, voucherID int64) (domain.Reconciliation, error) {
	return q.r.Reconciliation(ctx, voucherID)
}
