package graph

import (
	"context"

	"flashsale/domain"
	"flashsale/graph/model"
	"flashsale/internal/auth"
)

// Orders is what buyers and admins do with orders (implemented by
// orders.Service).
type Orders interface {
	Get(ctx context.Context, c domain.Caller, id int64) (domain.Order, error)
	Mine(ctx context.Context, c domain.Caller, page domain.Page) ([]domain.Order, bool, error)
	OfUser(ctx context.Context, c domain.Caller, userID int64, page domain.Page) ([]domain.Order, bool, error)
	Pay(ctx context.Context, c domain.Caller, id int64) (domain.Order, error)
	Cancel(ctx context.Context, c domain.Caller, id int64) (domain.Order, error)
	AddStock(ctx context.Context, r domain.Restock) (domain.StockLevel, error)
}

// Reconciliations reports and repairs vouchers' stock identities
// (implemented by orders.Reconciler).
type Reconciliations interface {
	Reconcile(ctx context.Context, voucherID *int64, repair bool) ([]domain.ReconcileReport, error)
}

// caller is who asks, from the token (the operation policy has checked
// that there is one).
func caller(ctx context.Context) (domain.Caller, error) {
	id, err := auth.FromContext(ctx)
	if err != nil {
		return domain.Caller{}, err
	}
	return domain.Caller{UserID: id.UserID, Admin: id.IsAdmin()}, nil
}

// orderCall runs one order operation for the caller and maps the answer.
// A resolver wired without an order service (some tests) answers
// NOT_IMPLEMENTED rather than failing with an internal error.
func (r *Resolver) orderCall(ctx context.Context, field string, id int64, op func(Orders) func(context.Context, domain.Caller, int64) (domain.Order, error)) (*model.VoucherOrder, error) {
	if r.Orders == nil {
		return nil, notImplemented(field)
	}
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	o, err := op(r.Orders)(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return orderToModel(o), nil
}

// myOrders is the caller's page of orders as a connection.
func (r *Resolver) myOrders(ctx context.Context, first *int, after *string) (*model.VoucherOrderConnection, error) {
	return r.orderPage(ctx, "myOrders", first, after, func(c domain.Caller, page domain.Page) ([]domain.Order, bool, error) {
		return r.Orders.Mine(ctx, c, page)
	})
}

// userOrders is a user's page of orders, for an admin.
func (r *Resolver) userOrders(ctx context.Context, userID int64, first *int, after *string) (*model.VoucherOrderConnection, error) {
	return r.orderPage(ctx, "userOrders", first, after, func(c domain.Caller, page domain.Page) ([]domain.Order, bool, error) {
		return r.Orders.OfUser(ctx, c, userID, page)
	})
}

// orderPage is a page of orders as a connection.
func (r *Resolver) orderPage(ctx context.Context, field string, first *int, after *string, list func(domain.Caller, domain.Page) ([]domain.Order, bool, error)) (*model.VoucherOrderConnection, error) {
	if r.Orders == nil {
		return nil, notImplemented(field)
	}
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	page, err := pageFromArgs("order", first, after)
	if err != nil {
		return nil, err
	}
	os, more, err := list(c, page)
	countRows(ctx, len(os))
	if err != nil {
		return nil, err
	}
	conn := &model.VoucherOrderConnection{Edges: make([]*model.VoucherOrderEdge, len(os)), PageInfo: &model.PageInfo{HasNextPage: more}}
	for i, o := range os {
		cur := encodeCursor("order", o.ID)
		conn.Edges[i] = &model.VoucherOrderEdge{Cursor: cur, Node: orderToModel(o)}
		conn.PageInfo.EndCursor = &cur
	}
	return conn, nil
}

// addStock runs a restock and maps the new level.
func (r *Resolver) addStock(ctx context.Context, voucherID int64, amount int, requestID *string) (*model.StockUpdate, error) {
	if r.Orders == nil {
		return nil, notImplemented("addStock")
	}
	in := domain.Restock{VoucherID: voucherID, Amount: amount}
	if requestID != nil {
		if err := domain.CheckRequestID(*requestID); err != nil {
			return nil, err
		}
		in.Key = *requestID
	}
	l, err := r.Orders.AddStock(ctx, in)
	if err != nil {
		return nil, err
	}
	return stockToModel(l), nil
}

// orderStatuses maps the database codes to the contract's enum. The
// contract has no REFUNDING or TIMED_OUT: a refund in progress still
// holds its unit and shows PAID; a timed-out order is CANCELLED.
var orderStatuses = map[domain.OrderStatus]model.OrderStatus{
	domain.OrderUnpaid:    model.OrderStatusUnpaid,
	domain.OrderPaid:      model.OrderStatusPaid,
	domain.OrderUsed:      model.OrderStatusUsed,
	domain.OrderCancelled: model.OrderStatusCancelled,
	domain.OrderRefunding: model.OrderStatusPaid,
	domain.OrderRefunded:  model.OrderStatusRefunded,
}

func orderToModel(o domain.Order) *model.VoucherOrder {
	return &model.VoucherOrder{
		ID: o.ID, UserID: o.UserID, VoucherID: o.VoucherID, Status: orderStatuses[o.Status],
		CreatedAt: o.CreatedAt, PaidAt: o.PaidAt, CancelledAt: o.CancelledAt, PayDeadline: o.PayDeadline,
	}
}

func reconcileReportsToModel(reps []domain.ReconcileReport) []*model.ReconcileReport {
	out := make([]*model.ReconcileReport, len(reps))
	for i, r := range reps {
		out[i] = &model.ReconcileReport{
			VoucherID: r.VoucherID, InitialStock: r.Initial, Remaining: r.Remaining, Loaded: r.Loaded,
			Pending: r.Pending, LiveOrders: r.Live, InFlightOrders: r.InFlight, DeadLetteredOrders: r.DeadLettered,
			UsersOff: r.UsersOff, Drift: r.Drift(), Balanced: r.Balanced(), Repaired: r.Repaired, Lines: r.Lines,
		}
	}
	return out
}

func payOf(o Orders) func(context.Context, domain.Caller, int64) (domain.Order, error) { return o.Pay }
func cancelOf(o Orders) func(context.Context, domain.Caller, int64) (domain.Order, error) {
	return o.Cancel
}
func getOf(o Orders) func(context.Context, domain.Caller, int64) (domain.Order, error) { return o.Get }
