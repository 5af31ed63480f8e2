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
	// Tally is what the store counts of the voucher's sales, read in the
	// same atomic step as the rest.
	Tally SalesTally
}

// SalesTally is what the store counts of a voucher's sales, so that a
// sequencer can prove that its own record of them is whole before it
// answers a keyed grab from that record (actors' saleMemory): every sale
// adds one request id, and a reload of the voucher changes Load.
type SalesTally struct {
	// Counted is false for a store that keeps no tally: nothing may then
	// be answered from a record of sales.
	Counted bool
	// Requests is how many request ids sold under the current load (one
	// per order sold, whoever sold it).
	Requests int64
	// Buyers is how many users the store counts orders for (Claim only).
	Buyers int64
	// Load is the stamp of the store's load of the voucher ("" for a load
	// without one).
	Load string
	// Claim is the nonce of the newest activation's claim: from Claim,
	// the one this activation wrote; from a grab batch, the one the store
	// holds. A record of sales is proven only while they are equal, so a
	// second activation's claim, even one that drew the same fence from a
	// Redis that went back in time, ends every record kept before it.
	Claim string
	// Held tells that a reload holds the voucher's sales (Claim only):
	// orders of the lost load may still be added to the tally then.
	Held bool
}

// RedisView is what a node last knew of a voucher's Redis stock: the
// remaining stock, less what the node sold from the database since, and
// when Redis was read (VoucherState.SeenAt). Reserved counts the units
// that the node's script calls still in flight or undecided may have sold
// since (a stalled Redis runs a call it holds when it resumes): the
// database may not sell them.
type RedisView struct {
	Remaining int
	SeenAt    time.Time
	Reserved  int
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
	// Refusal is what the voucher's status, time window or a reload's hold
	// answers every grab that is no retry of a sale ("" when they allow a
	// sale), as the store saw it during the batch.
	Refusal SeckillCode
}

// RateCheck is one grab to admit under the rate limits shared in Redis:
// for the per-IP limit, the client's address ("" skips that limit).
type RateCheck struct {
	IP string
}
