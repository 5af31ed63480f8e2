package graph

import (
	"context"
	"flashsale/graph/model"
)

// CreateVoucher is the resolver for the createVoucher field.
func (r *mutationResolver) CreateVoucher(ctx context.Context, input model.CreateVoucherInput) (*model.Voucher, error) {
	v, err := r.Catalog.Create(ctx, newVoucherFromModel(input))
	if err != nil {
		return nil, err
	}
	return voucherToModel(v), nil
}

// SetVoucherStatus is the resolver for the setVoucherStatus field.
func (r *mutationResolver) SetVoucherStatus(ctx context.Context, id int64, status model.VoucherStatus) (*model.Voucher, error) {
	v, err := r.Catalog.SetStatus(ctx, id, statusFromModel(status))
	if err != nil {
		return nil, err
	}
	return voucherToModel(v), nil
}

// AddStock is the resolver for the addStock field.
func (r *mutationResolver) AddStock(ctx context.Context, voucherID int64, amount int, requestID *string) (*model.StockUpdate, error) {
	return r.addStock(ctx, voucherID, amount, requestID)
}

// SeckillVoucher is the resolver for the seckillVoucher field.
func (r *mutationResolver) SeckillVoucher(ctx context.Context, voucherID int64, requestID *string, ticket *string) (*model.SeckillResult, error) {
	return Grab(ctx, r.Seckill, voucherID, requestID, ticket)
}

// PayOrder is the resolver for the payOrder field.
func (r *mutationResolver) PayOrder(ctx context.Context, orderID int64) (*model.VoucherOrder, error) {
	return r.orderCall(ctx, "payOrder", orderID, payOf)
}

// CancelOrder is the resolver for the cancelOrder field.
func (r *mutationResolver) CancelOrder(ctx context.Context, orderID int64) (*model.VoucherOrder, error) {
	return r.orderCall(ctx, "cancelOrder", orderID, cancelOf)
}

// CreateRedPacket is the resolver for the createRedPacket field.
func (r *mutationResolver) CreateRedPacket(ctx context.Context, input model.CreateRedPacketInput) (*model.RedPacket, error) {
	return r.createRedPacket(ctx, input)
}

// GrabRedPacket is the resolver for the grabRedPacket field.
func (r *mutationResolver) GrabRedPacket(ctx context.Context, id int64, requestID *string) (*model.GrabRedPacketResult, error) {
	return r.grabRedPacket(ctx, id, requestID)
}

// Voucher is the resolver for the voucher field.
func (r *queryResolver) Voucher(ctx context.Context, id int64) (*model.Voucher, error) {
	v, err := r.Catalog.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return voucherToModel(v), nil
}

// Vouchers is the resolver for the vouchers field.
func (r *queryResolver) Vouchers(ctx context.Context, shopID *int64, first *int, after *string) (*model.VoucherConnection, error) {
	page, err := pageFromArgs("voucher", first, after)
	if err != nil {
		return nil, err
	}
	page.OmitTexts = !selectsLongTexts(ctx)
	vs, more, err := r.Catalog.List(ctx, shopID, page)
	countRows(ctx, len(vs))
	if err != nil {
		return nil, err
	}
	return voucherConnection(vs, more), nil
}

// Stock is the resolver for the stock field.
func (r *queryResolver) Stock(ctx context.Context, voucherID int64) (*model.StockUpdate, error) {
	l, err := r.Catalog.Stock(ctx, voucherID)
	if err != nil {
		return nil, err
	}
	return stockToModel(l), nil
}

// Order is the resolver for the order field.
func (r *queryResolver) Order(ctx context.Context, id int64) (*model.VoucherOrder, error) {
	return r.orderCall(ctx, "order", id, getOf)
}

// MyOrders is the resolver for the myOrders field.
func (r *queryResolver) MyOrders(ctx context.Context, first *int, after *string) (*model.VoucherOrderConnection, error) {
	return r.myOrders(ctx, first, after)
}

// RedPacket is the resolver for the redPacket field.
func (r *queryResolver) RedPacket(ctx context.Context, id int64) (*model.RedPacket, error) {
	return r.redPacket(ctx, id)
}

// StartsInMs is the resolver for the startsInMs field.
func (r *seckillInfoResolver) StartsInMs(ctx context.Context, obj *model.SeckillInfo) (int, error) {
	return msUntil(obj.BeginAt, r.now()), nil
}

// EndsInMs is the resolver for the endsInMs field.
func (r *seckillInfoResolver) EndsInMs(ctx context.Context, obj *model.SeckillInfo) (int, error) {
	return msUntil(obj.EndAt, r.now()), nil
}

// Seckill is the resolver for the seckill field.
func (r *stockUpdateResolver) Seckill(ctx context.Context, obj *model.StockUpdate) (*model.SeckillInfo, error) {
	return r.stockSeckill(ctx, obj)
}

// StockChanged is the resolver for the stockChanged field.
func (r *subscriptionResolver) StockChanged(ctx context.Context, voucherID int64) (<-chan *model.StockUpdate, error) {
	return r.stockChanged(ctx, voucherID)
}

// OrderChanged is the resolver for the orderChanged field.
func (r *subscriptionResolver) OrderChanged(ctx context.Context, orderID int64) (<-chan *model.VoucherOrder, error) {
	return r.orderChanged(ctx, orderID)
}

// Mutation returns MutationResolver implementation.
func (r *Resolver) Mutation() MutationResolver { return &mutationResolver{r} }

// Query returns QueryResolver implementation.
func (r *Resolver) Query() QueryResolver { return &queryResolver{r} }

// SeckillInfo returns SeckillInfoResolver implementation.
func (r *Resolver) SeckillInfo() SeckillInfoResolver { return &seckillInfoResolver{r} }

// StockUpdate returns StockUpdateResolver implementation.
func (r *Resolver) StockUpdate() StockUpdateResolver { return &stockUpdateResolver{r} }

// Subscription returns SubscriptionResolver implementation.
func (r *Resolver) Subscription() SubscriptionResolver { return &subscriptionResolver{r} }

type (
	mutationResolver     struct{ *Resolver }
	queryResolver        struct{ *Resolver }
	seckillInfoResolver  struct{ *Resolver }
	stockUpdateResolver  struct{ *Resolver }
	subscriptionResolver struct{ *Resolver }
)
