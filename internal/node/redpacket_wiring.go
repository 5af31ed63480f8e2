package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"flashsale/actors"
	"flashsale/graph"
	"flashsale/internal/config"
	"flashsale/internal/redpackets"
	"flashsale/persistence"
)

var (
	_ graph.RedPackets       = (*redpackets.Service)(nil)
	_ redpackets.Storer      = (*persistence.RedPacketStore)(nil)
	_ redpackets.IDs         = (*persistence.OrderIDs)(nil)
	_ redpackets.Grabber     = (*actors.RedPackets)(nil)
	_ actors.RedPacketStore  = (*persistence.RedPacketRedis)(nil)
	_ actors.RedPacketLoader = (*persistence.RedPacketStore)(nil)
)

// redPacketsPart is the wiring of red packets: the red-packet service, its
// sequencer in the router's actor system, the writer of the red-packet
// order logs and the refunds (a singleton under the orders' Redlock).
type redPacketsPart struct {
	service *redpackets.Service
	writer  *persistence.RedPacketWriter
	refunds *redpackets.Refunds
}

// startRedPackets wires the red packets and starts their writer and
// refunds (bg runs the writer; stop stops the refunds).
func (a *app) startRedPackets(ctx context.Context, bg *loops) (*redPacketsPart, error) {
	p := &redPacketsPart{}
	rds := persistence.NewRedPacketRedis(a.acked)
	rds.Acks = persistence.Acks{Replicas: a.cfg.RedisAckReplicas, Timeout: a.cfg.RedisAckTimeout}
	store := persistence.NewRedPacketStore(a.db, rds)
	if a.mini != nil {
		store.ReloadHold = time.Millisecond // as the vouchers' (app.go): nobody to wait for
	}
	p.service = redpackets.New(store, a.ids, a.router.RedPackets(rds, store), redpackets.Config{
		MaxOpenPerUser: a.cfg.RedPacketMaxOpenPerUser,
		RefundLag:      a.cfg.RedPacketRefundGrace + a.cfg.RedPacketRefundInterval,
	})
	p.writer = persistence.NewRedPacketWriter(a.db, a.bg, a.log, logConsumerOptions(a.cfg))
	if err := p.writer.Acquire(ctx); errors.Is(err, persistence.ErrConsumerInUse) {
		return nil, &config.Error{Var: "NODE_ID", Msg: err.Error() + "; give each node its own NODE_ID"}
	} else if err != nil {
		return nil, fmt.Errorf("red-packet writer: %w", err)
	}
	bg.Go(func(ctx context.Context) {
		if err := p.writer.Run(ctx); err != nil {
			a.log.Error("red-packet writer stopped", "err", err)
		}
	})
	p.refunds = redpackets.NewRefunds(store, a.orders.locker, redpackets.RefundConfig{
		Interval: a.cfg.RedPacketRefundInterval, Grace: a.cfg.RedPacketRefundGrace,
	}, a.log)
	if err := p.refunds.Start(bg.ctx); err != nil {
		return p, err
	}
	return p, nil
}

// stop stops the refunds, after their run under way returned.
func (p *redPacketsPart) stop() {
	if p != nil && p.refunds != nil {
		p.refunds.Stop()
	}
}
