package graph

import (
	"context"
	"time"

	"flashsale/domain"
	"flashsale/graph/model"
)

// SaleStats follows a voucher's sale for the console (salestats.Service):
// the subscription's goroutine is started and owned by it, ends with ctx
// and then calls done.
type SaleStats interface {
	Subscribe(ctx context.Context, voucherID int64, send func(domain.SaleStats) bool, done func()) error
}

// Nodes lists the nodes' statuses (persistence.NodeStatuses).
type Nodes interface {
	List(ctx context.Context) ([]domain.NodeStatus, error)
}

func (r *Resolver) clusterNodes(ctx context.Context) ([]*model.ClusterNode, error) {
	if r.Nodes == nil {
		return nil, notImplemented("clusterNodes")
	}
	ns, err := r.Nodes.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*model.ClusterNode, len(ns))
	for i, n := range ns {
		out[i] = nodeToModel(n)
	}
	return out, nil
}

func nodeToModel(n domain.NodeStatus) *model.ClusterNode {
	m := &model.ClusterNode{
		ID: n.ID, HTTPAddr: n.HTTPAddr, Members: nonNil(n.Members), Segments: nonNil(n.Segments),
		RedisMode: n.RedisMode, Redis: n.Redis, Primaries: nonNil(n.Primaries),
		AckReplicas: n.AckReplicas, AckTimeoutMs: int(n.AckTimeout.Milliseconds()), AckAof: n.AckAOF,
		Held: make([]*model.HeldSale, len(n.Held)), At: n.At,
	}
	if n.Member != "" {
		m.Member = &n.Member
	}
	for i, h := range n.Held {
		m.Held[i] = &model.HeldSale{VoucherID: h.VoucherID, Since: h.Since, Why: h.Why}
	}
	return m
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (r *Resolver) saleStats(ctx context.Context, voucherID int64) (<-chan *model.SaleStats, error) {
	if r.SaleStats == nil {
		return nil, notImplemented("saleStats")
	}
	return follow(ctx, func(send func(domain.SaleStats) bool, done func()) error {
		return r.SaleStats.Subscribe(ctx, voucherID, send, done)
	}, saleStatsToModel)
}

func saleStatsToModel(s domain.SaleStats) *model.SaleStats {
	out := &model.SaleStats{
		VoucherID:  s.VoucherID,
		At:         s.At,
		Second:     time.Unix(s.Last.Second, 0).UTC(),
		Grabs:      make([]*model.GrabCount, len(domain.SaleCodes)),
		GrabsTotal: int(s.Last.Total()),
		Nodes:      int(s.Last.Nodes),
		Remaining:  s.Remaining,
		Sold:       s.Sold,
		Stored:     s.Stored,
		AnsweredOk: int(s.Answered),
	}
	for i, c := range domain.SaleCodes {
		out.Grabs[i] = &model.GrabCount{Code: c, Count: int(s.Last.Codes[i])}
	}
	if d, ok := s.Last.Quantile(0.5); ok {
		out.P50Ms = ms(d)
	}
	if d, ok := s.Last.Quantile(0.99); ok {
		out.P99Ms = ms(d)
	}
	if s.Room != nil {
		w, a := int(s.Room.Waiting), int(s.Room.Admitted)
		out.Waiting, out.Admitted = &w, &a
	}
	return out
}

func ms(d time.Duration) *float64 {
	f := float64(d.Microseconds()) / 1000
	return &f
}
