package graph

import (
	"context"

	"flashsale/domain"
)

// Catalog manages vouchers (implemented by catalog.Service).
type Catalog interface {
	Create(ctx context.Context, in domain.NewVoucher) (domain.Voucher, error)
	Get(ctx context.Context, id int64) (domain.Voucher, error)
	List(ctx context.Context, shopID *int64, page domain.Page) ([]domain.Voucher, bool, error)
	SetStatus(ctx context.Context, id int64, status domain.VoucherStatus) (domain.Voucher, error)
	SetSegments(ctx context.Context, id int64, segments int) (domain.Voucher, error)
	Stock(ctx context.Context, id int64) (domain.StockLevel, error)
	// TextSizes are the longest texts stored, which the request cost
	// prices (Complexity).
	TextSizes() domain.TextSizes
}

// Seckill is the grab use case, the gate then the router (implemented by
// seckill.Service). Outcomes are codes; an error is the gate's refusal.
type Seckill interface {
	Grab(ctx context.Context, req domain.GrabRequest, ticket string) (domain.GrabResult, error)
}

// DeadLetters lists the orders the database refused for good
// (implemented by persistence.DeadLetters).
type DeadLetters interface {
	List(ctx context.Context, voucherID *int64, first int, after string) ([]domain.DeadLetter, bool, error)
}

// Reconciler reads a voucher's stock identity (implemented by
// persistence.Reconciler).
type Reconciler interface {
	Reconcile(ctx context.Context, voucherID int64) (domain.Reconciliation, error)
}

// Resolver is the root of the resolvers; it holds the services they call.
type Resolver struct {
	Catalog     Catalog
	Seckill     Seckill
	DeadLetters DeadLetters
	Reconciler  Reconciler
	// Orders and Reconciliations serve the fields of orders after the sale
	// (pay, cancel, restock, reconcile); nil in servers that do not use
	// them.
	Orders          Orders
	Reconciliations Reconciliations
	// Live serves the subscriptions; nil answers NOT_IMPLEMENTED.
	Live Live
	// Gate serves the gate's fields (challenges, tickets, blocklists) and
	// the server's clock; nil answers those fields NOT_IMPLEMENTED. Grabs
	// pass the gate inside Seckill.
	Gate Gate
	// RedPackets serves the red-packet fields; nil answers
	// NOT_IMPLEMENTED.
	RedPackets RedPackets
	// Queue serves the waiting rooms' fields; nil answers
	// NOT_IMPLEMENTED.
	Queue Queue
	// SaleStats serves the console's live figures of a sale; nil answers
	// NOT_IMPLEMENTED.
	SaleStats SaleStats
	// Nodes serves the console's cluster view; nil answers
	// NOT_IMPLEMENTED.
	Nodes Nodes
}
