package node

import (
	"context"

	"flashsale/graph"
	"flashsale/internal/lifecycle"
	"flashsale/persistence"
	"flashsale/usecase/catalog"
	"flashsale/usecase/live"
	"flashsale/usecase/orders"
)

var (
	_ graph.Live       = (*live.Service)(nil)
	_ live.StockReader = (*catalog.Service)(nil)
	_ live.OrderReader = (*orders.Service)(nil)
	_ live.Bus         = (*persistence.Live)(nil)
)

var _ live.Announcements = (*persistence.Subscription)(nil)

// buildLive wires the live subscriptions: this node's sales are announced
// on Redis pub/sub, and every announcement (its own, other nodes', the
// voucher events and order changes) reaches the subscribers here. Its
// service is both loops: the fan-out and the announcements' follower,
// which stops first.
func (a *app) buildLive(context.Context) (lifecycle.Service, error) {
	bus := persistence.NewLive(a.bg)
	s := live.New(a.catalog, a.orders.service, bus, a.log, live.Options{})
	a.live = s
	return lifecycle.NewGroup(
		lifecycle.Named{Name: "live fan-out", Service: lifecycle.NewLoop(s.Run)},
		lifecycle.Named{Name: "live announcements", Service: newFollower(bus.Subscribe, func(ctx context.Context, announcements *persistence.Subscription) {
			if err := s.Follow(ctx, announcements); err != nil {
				a.log.Error("live-change watcher stopped", "err", err)
			}
		})},
	), nil
}
