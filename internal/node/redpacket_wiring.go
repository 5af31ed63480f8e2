package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/graph"
	"flashsale/internal/config"
	"flashsale/internal/lease"
	"flashsale/internal/redpackets"
	"flashsale/persistence"
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
// Redlock).
type redPacketsPart struct {
	service *redpackets.Service
	writer  *writer.Writer
	refunds *redpackets.Refunds
	pruning *redpackets.Pruning
}

// startRedPackets wires the red packets, starts their persistence actor
// in the router's actor system, their refunds and their pruning (stop
// stops them).
func (a *app) startRedPackets(ctx context.Context, bg *loops) (*redPacketsPart, error) {
	p := &redPacketsPart{}
	rds := persistence.NewRedPacketRedis(a.acked)
	rds.Acks = acksOf(a.cfg)
	store := persistence.NewRedPacketStore(a.db, rds)
	if a.mini != nil {
		store.ReloadHold = time.Millisecond // as the vouchers' (app.go): nobody to wait for
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
	if err := p.writer.Acquire(ctx); errors.Is(err, lease.ErrInUse) {
		return nil, &config.Error{Var: "NODE_ID", Msg: err.Error() + "; give each node its own NODE_ID"}
	} else if err != nil {
		return nil, fmt.Errorf("red-packet writer: %w", err)
	}
	if err := p.writer.Start(ctx); err != nil {
		return p, err
	}
	p.refunds = redpackets.NewRefunds(store, a.orders.locker, redpackets.RefundConfig{
		Interval: a.cfg.RedPacketRefundInterval, Grace: a.cfg.RedPacketRefundGrace,
	}, a.log)
	if err := p.refunds.Start(bg.ctx); err != nil {
		return p, err
	}
	p.pruning = redpackets.NewPruning(store, a.orders.locker, redpackets.PruneConfig{Retention: a.cfg.RedPacketRetention}, a.log)
	if err := p.pruning.Start(bg.ctx); err != nil {
		return p, err
	}
	return p, nil
}

// stop stops the pruning and the refunds, each after its run under way
// returned, then the persistence actor (the shutdown drained the
// red-packet logs already).
func (p *redPacketsPart) stop() {
	if p == nil {
		return
	}
	if p.pruning != nil {
		p.pruning.Stop()
	}
	if p.refunds != nil {
		p.refunds.Stop()
	}
	if p.writer != nil {
		p.writer.Stop()
	}
}
