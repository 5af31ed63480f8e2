package graph

import (
	"context"
	"flashsale/graph/model"
)

// UserOrders is the resolver for the userOrders field.
func (r *queryResolver) UserOrders(ctx context.Context, userID int64, first *int, after *string) (*model.VoucherOrderConnection, error) {
	return r.userOrders(ctx, userID, first, after)
}

// ClusterNodes is the resolver for the clusterNodes field.
func (r *queryResolver) ClusterNodes(ctx context.Context) ([]*model.ClusterNode, error) {
	return r.clusterNodes(ctx)
}

// SaleStats is the resolver for the saleStats field.
func (r *subscriptionResolver) SaleStats(ctx context.Context, voucherID int64) (<-chan *model.SaleStats, error) {
	return r.saleStats(ctx, voucherID)
}
