package domain

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
