package graph

import (
	"context"
	"sync"

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
