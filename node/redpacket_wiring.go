package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/config"
	"flashsale/graph"
	"flashsale/internal/lease"
	"flashsale/internal/lifecycle"
	"flashsale/persistence"
	"flashsale/usecase/redpackets"
)

var (
	_ graph.RedPackets       = (*redpackets.Service)(nil)
	_ redpackets.Storer      = (*persistence.RedPacketStore)(nil)
	_ redpackets.Pruner      = (*persistence.RedPacketStore)(nil)
	_ redpackets.IDs         = (*persistence.OrderIDs)(nil)
	_ redpackets.Grabber     = (*actors.RedPackets)(nil)
	_ actors.RedPacketStore  = (*persistence.RedPacketRedis)(nil)
	_ actors.RedPacketLoader = (*persistence.RedPacketStore)(nil)
	_ writer.Handler         = (*persistence.RedPacketLogHandler)(nil)
)

// redPacketsPart is the wiring of red packets: the red-packet service, its
// sequencer in the router's actor system, the writer of the red-packet
// order logs, the refunds and the pruning (singletons under the orders'
// Redlock). Its service starts the writer, the refunds and the pruning in
// this order and stops them in reverse (the shutdown drained the
// red-packet logs already).
type redPacketsPart struct {
	*lifecycle.Group
	service *redpackets.Service
	writer  *writer.Writer
	refunds *redpackets.Refunds
	pruning *redpackets.Pruning
}

// buildRedPackets wires the red packets and takes their writer's consumer
// name.
func (a *app) buildRedPackets(ctx context.Context) (lifecycle.Service, error) {
	p := &redPacketsPart{}
	rds := persistence.NewRedPacketRedis(a.acked)
	rds.Acks = acksOf(a.cfg)
	store := persistence.NewRedPacketStore(a.db, rds)
	if a.mini != nil {
		store.ReloadHold = time.Millisecond // as the vouchers' (buildCatalog): nobody to wait for
	}
	p.service = redpackets.New(store, a.ids, a.router.RedPackets(rds, store), redpackets.Config{
		MaxOpenPerUser:   a.cfg.RedPacketMaxOpenPerUser,
		MaxPerUserPerDay: a.cfg.RedPacketMaxPerUserPerDay,
		RefundLag: cmp.Or(a.cfg.RedPacketRefundGrace, redpackets.RefundGraceDefault) +
			cmp.Or(a.cfg.RedPacketRefundInterval, redpackets.RefundIntervalDefault),
	})
	opts := logConsumerOptions(a.cfg)
	fam := writer.RedPackets(persistence.NewRedPacketLogs(a.bg),
		persistence.NewRedPacketLogHandler(a.db, a.bg, a.log, persistence.BatchOptions(opts.StoreOptions())))
	p.writer = writer.New(fam, a.router.ActorSystem(), a.log, opts)
	a.wakers.add(p.writer)
	if err := p.writer.Acquire(ctx); errors.Is(err, lease.ErrInUse) {
		return nil, &config.Error{Var: "NODE_ID", Msg: err.Error() + "; give each node its own NODE_ID"}
	} else if err != nil {
		return nil, fmt.Errorf("red-packet writer: %w", err)
	}
	p.refunds = redpackets.NewRefunds(store, a.orders.locker, redpackets.RefundConfig{
		Interval: a.cfg.RedPacketRefundInterval, Grace: a.cfg.RedPacketRefundGrace,
	}, a.log)
	p.pruning = redpackets.NewPruning(store, a.orders.locker, redpackets.PruneConfig{Retention: a.cfg.RedPacketRetention}, a.log)
	p.Group = lifecycle.NewGroup(
		lifecycle.Named{Name: "red-packet writer", Service: p.writer},
		lifecycle.Named{Name: "refunds", Service: p.refunds},
		lifecycle.Named{Name: "pruning", Service: p.pruning},
	)
	a.redPkts = p
	return p, nil
}
