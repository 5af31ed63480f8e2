package graph

import (
	"context"
	"flashsale/graph/model"
	"time"
)

// ServerTime is the resolver for the serverTime field.
func (r *queryResolver) ServerTime(ctx context.Context) (*time.Time, error) {
	now := r.now()
	return &now, nil
}

// SeckillChallenge is the resolver for the seckillChallenge field.
func (r *queryResolver) SeckillChallenge(ctx context.Context, voucherID int64) (*model.SeckillChallenge, error) {
	return r.seckillChallenge(ctx, voucherID)
}

// SeckillTicket is the resolver for the seckillTicket field.
func (r *queryResolver) SeckillTicket(ctx context.Context, voucherID int64, challenge *string, nonce *string) (*model.SeckillTicket, error) {
	return r.seckillTicket(ctx, voucherID, challenge, nonce)
}
