package graph

import (
	"context"
	"sync"

	"github.com/99designs/gqlgen/graphql"

	"flashsale/domain"
	"flashsale/graph/model"
)

// Live follows stock levels and orders for the subscriptions
// (live.Service). Each subscription's goroutine is started and owned by
// it: it ends with ctx and then calls done.
type Live interface {
	SubscribeStock(ctx context.Context, voucherID int64, send func(domain.StockLevel) bool, done func()) error
	SubscribeOrder(ctx context.Context, c domain.Caller, orderID int64, send func(domain.Order) bool, done func()) error
}

// follow starts a subscription and hands gqlgen its channel, converting
// each value. The channel is unbuffered: the live service coalesces for a
// subscriber that reads slowly, so nothing queues here. Nothing
// request-scoped (dataloaders) is used: the subscription outlives the
// request that started it.
func follow[D, M any](ctx context.Context, start func(send func(D) bool, done func()) error, conv func(D) M) (<-chan M, error) {
	out := make(chan M)
	send := func(v D) bool {
		select {
		case out <- conv(v):
			return true
		case <-ctx.Done():
			return false
		}
	}
	// The gauge counts the subscription from here until its end, once,
	// whether it ends by its done or by a failed start.
	SubscriptionOpened()
	var once sync.Once
	closed := func() { once.Do(SubscriptionClosed) }
	if err := start(send, func() { close(out); closed() }); err != nil {
		closed()
		return nil, err
	}
	return out, nil
}

func (r *Resolver) stockChanged(ctx context.Context, voucherID int64) (<-chan *model.StockUpdate, error) {
	if r.Live == nil {
		return nil, notImplemented("stockChanged")
	}
	return follow(ctx, func(send func(domain.StockLevel) bool, done func()) error {
		return r.Live.SubscribeStock(ctx, voucherID, send, done)
	}, stockToModel)
}

func (r *Resolver) orderChanged(ctx context.Context, orderID int64) (<-chan *model.VoucherOrder, error) {
	if r.Live == nil || r.Orders == nil {
		return nil, notImplemented("orderChanged")
	}
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	return follow(ctx, func(send func(domain.Order) bool, done func()) error {
		return r.Live.SubscribeOrder(ctx, c, orderID, send, done)
	}, orderToModel)
}

// stockSeckill is StockUpdate.seckill. Its id, remaining and
// initialStock are the update's own, so a live event that selects only
// those (what a client cache needs) costs nothing beyond the stock read
// the live service already made for every subscriber. The voucher's
// terms are fetched only when the selection asks for one, from the
// gate's per-node cache: never a database read per event and subscriber.
func (r *Resolver) stockSeckill(ctx context.Context, u *model.StockUpdate) (*model.SeckillInfo, error) {
	if !asksTerms(ctx) {
		return &model.SeckillInfo{ID: u.VoucherID, InitialStock: u.Remaining + u.Sold, Remaining: u.Remaining}, nil
	}
	terms, err := r.seckillTerms(ctx, u.VoucherID)
	if err != nil {
		return nil, err
	}
	info := seckillInfoToModel(u.VoucherID, terms)
	info.InitialStock, info.Remaining = u.Remaining+u.Sold, u.Remaining
	return info, nil
}

// stockFields are the SeckillInfo fields a stock update carries itself.
var stockFields = map[string]bool{"__typename": true, "id": true, "remaining": true, "initialStock": true}

// asksTerms reports whether the field's selection asks for a SeckillInfo
// field the stock update does not carry.
func asksTerms(ctx context.Context) bool {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return true
	}
	for _, f := range graphql.CollectFields(graphql.GetOperationContext(ctx), fc.Field.Selections, []string{"SeckillInfo"}) {
		if !stockFields[f.Name] {
			return true
		}
	}
	return false
}

// seckillTerms reads a seckill voucher's terms: from the gate's cache,
// or from the catalog in a server without a gate.
func (r *Resolver) seckillTerms(ctx context.Context, voucherID int64) (domain.Seckill, error) {
	if r.Gate != nil {
		return r.Gate.Terms(ctx, voucherID)
	}
	v, err := r.Catalog.Get(ctx, voucherID)
	if err != nil {
		return domain.Seckill{}, err
	}
	if v.Seckill == nil {
		return domain.Seckill{}, domain.NotFound("seckill voucher", voucherID)
	}
	return *v.Seckill, nil
}
