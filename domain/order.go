package domain

import (
	"strconv"
	"time"
)

// OrderStatus is stored as tb_voucher_order.status.
type OrderStatus int16

// Order statuses (db contract codes).
const (
	OrderUnpaid    OrderStatus = 1
	OrderPaid      OrderStatus = 2
	OrderUsed      OrderStatus = 3
	OrderCancelled OrderStatus = 4
	OrderRefunding OrderStatus = 5
	OrderRefunded  OrderStatus = 6
)

// DeadOrderStatuses are the statuses of orders that no longer hold stock;
// every other order is live.
var DeadOrderStatuses = []OrderStatus{OrderCancelled, OrderRefunded}

// Live reports whether an order in status s holds a unit of stock.
func (s OrderStatus) Live() bool { return s != OrderCancelled && s != OrderRefunded }

// Why an order was cancelled: by its owner, or by the service after its
// pay deadline. Both are OrderCancelled (the contract has no TIMED_OUT);
// the ledger's reasons use the same words.
const (
	CancelByOwner = "cancel"
	CancelTimeout = "timeout"
)

// Order is a voucher order as its owner sees it.
type Order struct {
	ID        int64
	UserID    int64
	VoucherID int64
	Status    OrderStatus
	// CancelReason is CancelByOwner or CancelTimeout for a cancelled
	// order, "" otherwise.
	CancelReason string
	CreatedAt    time.Time
	PaidAt       *time.Time
	CancelledAt  *time.Time
	// PayDeadline is CreatedAt plus the pay timeout: an UNPAID order is
	// cancelled after it.
	PayDeadline time.Time
	// InFlight is true for an order accepted by Redis and still in the
	// order log, not yet in the database.
	InFlight bool
}

// Caller is who asks: a user, or an admin who may see every order.
type Caller struct {
	UserID int64
	Admin  bool
}

// CanSee reports whether the caller may see the order; anyone else is
// told NOT_FOUND, never that the order exists.
func (c Caller) CanSee(o Order) bool { return c.Admin || c.UserID == o.UserID }

// OrderNotFound is the answer for an unknown order and for another user's.
func OrderNotFound(id int64) *Error { return NotFound("order", id) }

// Restock is an admin's addStock: Key makes a retried request change the
// stock once.
type Restock struct {
	VoucherID int64
	Amount    int
	Key       string
}

// MaxRestock bounds one addStock amount, like a voucher's initial stock.
const MaxRestock = 100_000_000

// Validate checks the amount and the key.
func (r Restock) Validate() error {
	if r.Amount < 1 || r.Amount > MaxRestock {
		return InvalidField("amount", "must be between 1 and %d", MaxRestock)
	}
	if r.Key != "" {
		if err := CheckRequestID(r.Key); err != nil {
			return err
		}
	}
	return nil
}

// Word is how messages name an order status.
func (s OrderStatus) Word() string {
	switch s {
	case OrderUnpaid:
		return "unpaid"
	case OrderPaid:
		return "paid"
	case OrderUsed:
		return "used"
	case OrderCancelled:
		return "cancelled"
	case OrderRefunding:
		return "being refunded"
	case OrderRefunded:
		return "refunded"
	}
	return "in status " + strconv.Itoa(int(s))
}

// OrderNotPayable answers a payment of order id, which is in status s
// (cancelled for reason, CancelByOwner or CancelTimeout, when s is
// OrderCancelled).
func OrderNotPayable(id int64, s OrderStatus, reason string) *Error {
	if s == OrderCancelled {
		if reason == CancelTimeout {
			return Errorf(CodeBadInput, "order %d was not paid before its deadline and was cancelled; it cannot be paid", id)
		}
		return Errorf(CodeBadInput, "order %d was cancelled; it cannot be paid", id)
	}
	return Errorf(CodeBadInput, "order %d is %s; only an unpaid order can be paid", id, s.Word())
}

// OrderNotCancellable answers a cancellation of order id, which is in
// status s (cancelled for reason when s is OrderCancelled).
func OrderNotCancellable(id int64, s OrderStatus, reason string) *Error {
	if s == OrderCancelled && reason == CancelTimeout {
		return Errorf(CodeBadInput, "order %d was not paid before its deadline and was cancelled already", id)
	}
	return Errorf(CodeBadInput, "order %d is %s; only an unpaid order can be cancelled", id, s.Word())
}

// RestockOfEndedVoucher answers an addStock of a sale that ended.
func RestockOfEndedVoucher(id int64) *Error {
	return Errorf(CodeBadInput, "voucher %d has ended; an ended sale takes no restock", id)
}

// RestockPastMaxStock answers an addStock that would take a voucher's
// stock past max.
func RestockPastMaxStock(max int) *Error {
	return InvalidField("amount", "would take the voucher's stock past %d", max)
}
