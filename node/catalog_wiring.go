package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"flashsale/config"
	"flashsale/internal/lease"
	"flashsale/internal/lifecycle"
	"flashsale/persistence"
	"flashsale/usecase/catalog"
)

// buildCatalog builds the catalog and the end of its reloads' holds, and
// preheats every live voucher. The holds run before the preheat, whose
// reloads they end: their loop is started here, and is the catalog's
// service (a second Start of a loop does nothing).
func (a *app) buildCatalog(ctx context.Context) (lifecycle.Service, error) {
	log := a.log
	stock := persistence.NewStock(a.rdb)
	if a.mini != nil {
		// The embedded Redis lives and dies with this process, and so does
		// the only order writer that could hold orders of a lost load: a
		// reload has nobody to wait for (see persistence.ReloadHoldDefault).
		stock.ReloadHold = time.Millisecond
	}
	a.stock = stock
	a.catalog = catalog.New(persistence.NewVouchers(a.db), stock, log)
	// Reloads hold their sales only until no order writer can hold an
	// order of the lost load (the writers' lease rows).
	holds := catalog.NewHolds(persistence.HoldRows(a.db), stock, persistence.ReloadHoldDefault, log)
	a.catalog.Holds, a.holds = holds, holds
	holdsLoop := lifecycle.NewLoop(holds.Run)
	_ = holdsLoop.Start(ctx)
	// The start-up preheat reads every live voucher through the background
	// client: a request's 200 ms deadline is for a shopper waiting, and a
	// busy Redis must not stop a node from starting.
	startStock := persistence.NewStock(a.bg)
	startStock.ReloadHold = stock.ReloadHold
	a.warmer = catalog.New(persistence.NewVouchers(a.db), startStock, log)
	a.warmer.Holds = holds
	n, err := a.warmer.PreheatAll(ctx)
	if err != nil {
		return holdsLoop, fmt.Errorf("preheat vouchers: %w", err)
	}
	log.Info("seckill vouchers ready in redis", "vouchers", n)
	// The request cost prices texts by the longest stored (graph.Complexity).
	if err := a.catalog.RefreshTextSizes(ctx, true); err != nil {
		return holdsLoop, fmt.Errorf("read the longest voucher texts: %w", err)
	}
	return holdsLoop, nil
}

// buildOrderIDs acquires this node's order-id slot; its service is the
// slot's keeper, which renews it from the start and releases it at Stop.
func (a *app) buildOrderIDs(ctx context.Context) (lifecycle.Service, error) {
	// Order ids come from a node slot leased in the database, not from
	// Redis: they must not repeat when Redis loses its data.
	a.ids = persistence.NewOrderIDs(a.db, a.log, persistence.OrderIDOptions{})
	if err := a.ids.Acquire(ctx); err != nil {
		return nil, fmt.Errorf("order ids: %w", err)
	}
	keeper := lease.KeepSlot("order-id slot", a.ids, a.log)
	_ = keeper.Start(ctx) // a second Start does nothing
	warnLoneNodes(ctx, a.cfg, a.ids, a.log)
	return keeper, nil
}

// otherNodes counts the other nodes that sell from the same database.
type otherNodes interface {
	OtherLiveNodes(ctx context.Context) (int, error)
}

// warnLoneNodes warns when another node sells from this node's database
// while this one runs without an actor cluster (CLUSTER_PROVIDER=test):
// each such node hosts every voucher segment itself, the nodes contend for
// each segment's lease, and the one without it answers UNAVAILABLE
// (measured in a two-node sale with no fault: 280 of 579 grabs).
func warnLoneNodes(ctx context.Context, cfg config.Config, nodes otherNodes, log *slog.Logger) {
	if cfg.Embedded() || cfg.ClusterProvider != "test" {
		return
	}
	n, err := nodes.OtherLiveNodes(ctx)
	if err != nil || n == 0 {
		return
	}
	log.Warn("other nodes sell from this database, but CLUSTER_PROVIDER=test makes every node host every voucher segment "+
		"itself: the nodes contend for each segment's lease and answer UNAVAILABLE while another holds it; "+
		"set CLUSTER_PROVIDER=automanaged (or etcd) and one CLUSTER_NAME on every node", "other_nodes", n)
}

// buildStatusSync builds the job by which every node copies to Redis the status
// changes Redis missed (a pause whose Redis write failed), so that the
// record wins within a bound.
func (a *app) buildStatusSync(context.Context) (lifecycle.Service, error) {
	return catalog.NewStatusSync(a.catalog, a.cfg.StatusSyncInterval, a.log), nil
}
