package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

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

// ordersPart is the wiring of issue 9: the order service, reconciliation
// and the three maintenance services (pay timeout, pending-stock sweeper,
// background reconciliation), each running under a Redlock lease over
// LOCK_REDIS_URLS (the stock Redis in the embedded mode).
type ordersPart struct {
	service    *orders.Service
	reconciler *orders.Reconciler
	// locker runs the cluster-wide singletons (red-packet refunds too).
	locker *lease.Redlock
	locks  []*redis.Client
	done   []<-chan struct{}
}

// startOrders wires the order services and starts their maintenance on bg;
// stopOrders waits for it after bg is cancelled.
func (a *app) startOrders(bg context.Context, stock *persistence.Stock) (*ordersPart, error) {
	p := &ordersPart{}
	var nodes []redis.UniversalClient
	for _, u := range a.cfg.LockRedisURLs {
		opts, err := redis.ParseURL(u) // validated by config
		if err != nil {
			return nil, fmt.Errorf("LOCK_REDIS_URLS: %w", err)
		}
		c := redis.NewClient(opts)
		p.locks = append(p.locks, c)
		nodes = append(nodes, c)
	}
	if len(nodes) == 0 { // embedded mode: the in-process Redis
		nodes = []redis.UniversalClient{a.rdb}
	}
	locker := lease.New(nodes, 0, a.log)
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

// wait waits for the maintenance services (their context is cancelled)
// and closes the lock clients.
func (p *ordersPart) wait() {
	if p == nil {
		return
	}
	for _, d := range p.done {
		<-d
	}
	for _, c := range p.locks {
		_ = c.Close()
	}
}
