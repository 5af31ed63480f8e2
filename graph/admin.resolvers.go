package graph

import (
	"context"
	"flashsale/graph/model"
)

// SetVoucherSegments is the resolver for the setVoucherSegments field.
func (r *mutationResolver) SetVoucherSegments(ctx context.Context, voucherID int64, segments int) (*model.Voucher, error) {
	v, err := r.Catalog.SetSegments(ctx, voucherID, segments)
	if err != nil {
		return nil, err
	}
	return voucherToModel(v), nil
}

// SetVoucherGate is the resolver for the setVoucherGate field.
func (r *mutationResolver) SetVoucherGate(ctx context.Context, id int64, requireTicket *bool, challenge *model.ChallengeKind) (*model.Voucher, error) {
	return r.setVoucherGate(ctx, id, requireTicket, challenge)
}

// Block is the resolver for the block field.
func (r *mutationResolver) Block(ctx context.Context, target model.BlockTarget, expiresInSeconds *int) (*model.Block, error) {
	return r.block(ctx, target, expiresInSeconds)
}

// Unblock is the resolver for the unblock field.
func (r *mutationResolver) Unblock(ctx context.Context, target model.BlockTarget) (bool, error) {
	return r.unblock(ctx, target)
}

// DeadLetteredOrders is the resolver for the deadLetteredOrders field.
func (r *queryResolver) DeadLetteredOrders(ctx context.Context, voucherID *int64, first *int, after *string) (*model.DeadLetteredOrderConnection, error) {
	n, key, err := deadLetterPage(first, after)
	if err != nil {
		return nil, err
	}
	list, more, err := r.DeadLetters.List(ctx, voucherID, n, key)
	countRows(ctx, len(list))
	if err != nil {
		return nil, err
	}
	return deadLetterConnection(list, more), nil
}

// Reconciliation is the resolver for the reconciliation field.
func (r *queryResolver) Reconciliation(ctx context.Context, voucherID int64) (*model.Reconciliation, error) {
	rec, err := r.Reconciler.Reconcile(ctx, voucherID)
	if err != nil {
		return nil, err
	}
	return reconciliationToModel(rec), nil
}

// Reconcile is the resolver for the reconcile field.
func (r *queryResolver) Reconcile(ctx context.Context, voucherID *int64, repair *bool) ([]*model.ReconcileReport, error) {
	if r.Reconciliations == nil {
		return nil, notImplemented("reconcile")
	}
	reps, err := r.Reconciliations.Reconcile(ctx, voucherID, repair != nil && *repair)
	if err != nil {
		return nil, err
	}
	return reconcileReportsToModel(reps), nil
}

// Blocks is the resolver for the blocks field.
func (r *queryResolver) Blocks(ctx context.Context) ([]*model.Block, error) {
	return r.blocks(ctx)
}
