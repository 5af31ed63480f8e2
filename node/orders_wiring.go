package node

import (
	"context"
	"errors"
	"fmt"

	"flashsale/actors/writer"
	"flashsale/config"
	"flashsale/domain"
	"flashsale/graph"
	"flashsale/internal/lease"
	"flashsale/internal/lifecycle"
	"flashsale/internal/maintenance"
	"flashsale/persistence"
	"flashsale/usecase/catalog"
	"flashsale/usecase/orders"
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
// mode). Its service is the three jobs, started in this order and stopped
// in reverse, each after its run under way returned.
type ordersPart struct {
	*lifecycle.Group
	service    *orders.Service
	reconciler *orders.Reconciler
	// locker runs the cluster-wide singletons (red-packet refunds too).
	locker *lease.Redlock
}

// buildOrders wires the order services and their maintenance over the
// request path's stock.
func (a *app) buildOrders(context.Context) (lifecycle.Service, error) {
	p := &ordersPart{}
	locker := a.locks.redlock
	p.locker = locker
	store := persistence.NewOrders(a.db, a.rdb, a.log)
	p.service = orders.New(store, a.catalog, orders.Config{PayTimeout: a.cfg.PayTimeout}, a.log)
	p.reconciler = orders.NewReconciler(persistence.NewReconciliations(a.db, a.rdb), a.stock, a.catalog, locker,
		orders.ReconcileConfig{Interval: a.cfg.ReconcileInterval}, a.log)
	p.Group = lifecycle.NewGroup(
		lifecycle.Named{Name: "pay timeout", Service: orders.NewTimeouts(store, locker,
			orders.TimeoutConfig{PayTimeout: a.cfg.PayTimeout, Interval: a.cfg.PayTimeoutInterval}, a.log)},
		lifecycle.Named{Name: "sweeper", Service: orders.NewSweeper(store, locker, orders.SweepConfig{}, a.log)},
		lifecycle.Named{Name: "reconciler", Service: p.reconciler},
	)
	a.orders = p
	return p, nil
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

// buildOrderWriter builds the persistence actor of the order logs in the
// router's actor system, supervised there (it stops before the router
// stops the system), and takes its consumer name, NODE_ID.
func (a *app) buildOrderWriter(ctx context.Context) (lifecycle.Service, error) {
	writerOpts := logConsumerOptions(a.cfg)
	a.traceWriter(&writerOpts)
	writerOpts.Reclaim = func(ctx context.Context, fn func(context.Context) error) (bool, error) {
		return a.locks.redlock.Do(ctx, "order-log-reclaim", fn)
	}
	fam := writer.Orders(persistence.NewOrderLogs(a.bg),
		persistence.NewOrderLogHandler(a.db, a.bg, a.log, persistence.BatchOptions(writerOpts.StoreOptions())),
		persistence.NewWriterLeases(a.db, persistence.OrdersFamily))
	w := writer.New(fam, a.router.ActorSystem(), a.log, writerOpts)
	if err := w.Acquire(ctx); errors.Is(err, lease.ErrInUse) {
		return nil, &config.Error{Var: "NODE_ID", Msg: err.Error() + "; give each node its own NODE_ID"}
	} else if err != nil {
		return nil, fmt.Errorf("order writer: %w", err)
	}
	a.writer = w
	a.wakers.add(w)
	return w, nil
}

// logConsumerOptions are the settings the order and red-packet writers
// share. ORDER_LOG_LINGER=0 is held as config.Off, the options' "no
// wait" (their zero takes the default).
func logConsumerOptions(cfg config.Config) writer.Options {
	return writer.Options{Consumer: cfg.NodeID, ClaimIdle: cfg.OrderLogClaimIdle, Linger: cfg.OrderLogLinger}
}
