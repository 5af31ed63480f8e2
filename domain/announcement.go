package domain

// Announcement is a change one node tells every node about (over Redis
// pub/sub), or the news that some may have been missed. A subscriber
// reads them one at a time from its subscription, in a loop it owns.
type Announcement struct {
	Kind AnnouncementKind
	// IDs are the vouchers (or, for OrdersChanged, the orders) the change
	// is about; none for Missed and BlocklistChanged.
	IDs []int64
}

// AnnouncementKind says what an Announcement is about.
type AnnouncementKind int

// The kinds of announcements.
const (
	// Missed: the subscription was (re)established, and what was
	// announced while it was down is lost; the subscriber re-reads
	// everything it holds.
	Missed AnnouncementKind = iota + 1
	// VoucherChanged: vouchers changed outside the grab script (status,
	// restock, returned units, reload); their actors reload them.
	VoucherChanged
	// StockChanged: the stock of vouchers changed (a node's sales, or a
	// voucher change).
	StockChanged
	// OrdersChanged: orders changed (paid, cancelled, timed out).
	OrdersChanged
	// BlocklistChanged: the gate's blocklist changed.
	BlocklistChanged
	// GateChanged: a voucher's gate changed.
	GateChanged
)
