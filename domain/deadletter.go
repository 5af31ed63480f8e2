package domain

import "time"

// DeadLetter is an order Redis accepted that the database refused for good
// (for example past the stock, after Redis lost data): kept for an
// operator with the reason, never dropped in silence. The ids are nil for
// an order-log entry that could not be read at all.
type DeadLetter struct {
	// Key names the order-log entry: "<order log>/<entry id>".
	Key       string
	OrderID   *int64
	UserID    *int64
	VoucherID *int64
	RequestID *string
	// Reason is a short code (persistence.DeadOverStock, ...); Detail says
	// what the database answered.
	Reason string
	Detail string
	At     time.Time
}
