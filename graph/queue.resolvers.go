package graph

import (
	"context"
	"flashsale/graph/model"
)

// JoinQueue is the resolver for the joinQueue field.
func (r *mutationResolver) JoinQueue(ctx context.Context, voucherID int64, challenge *string, nonce *string) (*model.QueuePlace, error) {
	return r.joinQueue(ctx, voucherID, challenge, nonce)
}

// SetWaitingRoom is the resolver for the setWaitingRoom field.
func (r *mutationResolver) SetWaitingRoom(ctx context.Context, voucherID int64, admitPerSecond *int, maxActive *int, paused *bool) (*model.Voucher, error) {
	return r.setWaitingRoom(ctx, voucherID, admitPerSecond, maxActive, paused)
}

// QueuePlace is the resolver for the queuePlace field.
func (r *queryResolver) QueuePlace(ctx context.Context, voucherID int64) (*model.QueuePlace, error) {
	return r.queuePlace(ctx, voucherID)
}

// QueueChanged is the resolver for the queueChanged field.
func (r *subscriptionResolver) QueueChanged(ctx context.Context, voucherID int64) (<-chan *model.QueuePlace, error) {
	return r.queueChanged(ctx, voucherID)
}
