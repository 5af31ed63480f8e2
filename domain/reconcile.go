package domain

// Reconciliation is one voucher's stock identity (invariant 5), read at one
// moment: every unit ever put on sale is either still for sale in Redis,
// held by a live order in the database, on its way there in the order log,
// or dead-lettered (sold by Redis, refused by the database).
type Reconciliation struct {
	VoucherID int64
	// Initial is the stock at creation plus every restock.
	Initial int
	// Remaining is the stock Redis still sells; Loaded is false when Redis
	// holds no load of the voucher (then nothing else Redis says counts).
	Remaining int
	Loaded    bool
	// Live counts the live orders in the database, InFlight the orders of
	// the order log not yet there, DeadLettered the orders of the current
	// load the database refused.
	Live         int
	InFlight     int
	DeadLettered int
	// Pending counts units the database returned or restocked that Redis
	// has not applied yet (tb_stock_pending, for the load Redis holds).
	Pending int
	// LoadStamp is the stamp of the load Redis holds ("" when none).
	LoadStamp string
	// UsersOff counts the users whose mark in Redis differs from their
	// live, in-flight and dead-lettered orders.
	UsersOff int
}

// Balanced reports whether the identity holds: initial stock = remaining +
// pending + live + in-flight + dead-lettered, and every user's mark in
// Redis equals their live, in-flight, dead-lettered and pending-return
// orders.
func (r Reconciliation) Balanced() bool {
	return r.Loaded && r.Drift() == 0 && r.UsersOff == 0
}

// Drift is how far the stock identity is off (0 when it holds).
func (r Reconciliation) Drift() int {
	d := r.Initial - (r.Remaining + r.Pending + r.Live + r.InFlight + r.DeadLettered)
	if d < 0 {
		return -d
	}
	return d
}

// ReconcileReport is one voucher's reconciliation as an admin or the
// background job reads it: the identity, whether Redis was rebuilt from
// the database, and what was found, in words.
type ReconcileReport struct {
	Reconciliation
	Repaired bool
	Lines    []string
}
