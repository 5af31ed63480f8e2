package node

import (
	"context"

	"flashsale/graph"
	"flashsale/internal/catalog"
	"flashsale/internal/live"
	"flashsale/internal/orders"
	"flashsale/persistence"
)

var (
	_ graph.Live       = (*live.Service)(nil)
	_ live.StockReader = (*catalog.Service)(nil)
	_ live.OrderReader = (*orders.Service)(nil)
	_ live.Bus         = (*persistence.Live)(nil)
)

var _ live.Announcements = (*persistence.Subscription)(nil)

// startLive wires the live subscriptions: this node's sales are announced
// on Redis pub/sub, and every announcement (its own, other nodes', the
// voucher events and order changes) reaches the subscribers here. Both
// loops run on bg.
func (a *app) startLive(bg *loops) *live.Service {
	bus := persistence.NewLive(a.bg)
	s := live.New(a.catalog, a.orders.service, bus, a.log, live.Options{})
	bg.Go(s.Run)
	announcements := bus.Subscribe(bg.ctx)
	bg.Go(func(ctx context.Context) {
		defer announcements.Close()
		if err := s.Follow(ctx, announcements); err != nil {
			a.log.Error("live-change watcher stopped", "err", err)
		}
	})
	return s
}
