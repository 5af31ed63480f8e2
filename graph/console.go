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
