package domain

import "time"

// The types below are what the grab sequencer (actors) and the stock store
// (persistence) say to each other. They live here, not in either package,
// so that actors declares its store interfaces in the domain's words and
// never imports persistence: main wires the two together.

// Grab is one grab of a batch, ready for the store: its request id (the
// key a retried grab is recognised by) and the order id it takes if it
// sells, allocated before the call so that a retried batch sells under the
// same ids.
type Grab struct {
	RequestID string
	UserID    int64
	OrderID   int64
}

// VoucherState is what an actor may cache about a voucher, so that it can
// answer sold out, not started, ended or paused from memory. The store is
// the authority; the cache only spares it the grabs it would refuse.
type VoucherState struct {
	// Found is false for an id the store does not know as a seckill
	// voucher; the other fields are then zero.
	Found  bool
	Status VoucherStatus
	Begin  time.Time
	End    time.Time
	Limit  int
	// Segments is the voucher's segment count (1 when unset).
	Segments  int
	Remaining int
	// SeenAt is when the store began the call that read this state: the
	// state is at least as new as SeenAt. The database fallback needs it
	// to know which other nodes' Redis sales it may not have seen.
	SeenAt time.Time
}

// RedisView is what a node last knew of a voucher's Redis stock: the
// remaining stock, less what the node sold from the database since, and
// when Redis was read (VoucherState.SeenAt).
type RedisView struct {
	Remaining int
	SeenAt    time.Time
}

// BatchOutcome is the store's answer to a batch of grabs.
type BatchOutcome struct {
	// Stale means the fencing token was superseded: nothing was sold and
	// the activation must stop.
	Stale bool
	// State is the voucher as the batch left it (not set when Stale).
	State VoucherState
	// Results has one result per grab of the batch, in order.
	Results []GrabResult
}

// RateCheck is one grab to admit under the rate limits shared in Redis:
// for the per-IP limit, the client's address ("" skips that limit).
type RateCheck struct {
	IP string
}
