package actors

// Views of a router's state for the tests, so that they wait for a state
// instead of sleeping for it. Compiled into tests only.

// Queued reports how many grabs of the voucher this node holds unanswered
// (0 when it runs no actor for it).
func Queued(r *Router, voucherID int64) int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if ref := r.vouchers[voucherID]; ref != nil {
		return ref.queued.Load()
	}
	return 0
}

// Closing reports whether Close has begun (it takes no new grabs and holds
// its own copy of the actors it waits for).
func Closing(r *Router) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.closed
}
