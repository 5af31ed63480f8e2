package actors

import (
	"slices"
	"strconv"
)

// Hosted lists the voucher segments this node runs an activation of now,
// as "<voucher>/<segment>", sorted: what the console shows of a member.
func (r *Router) Hosted() []string {
	r.mu.RLock()
	out := make([]string, 0, len(r.vouchers))
	for key := range r.vouchers {
		out = append(out, strconv.FormatInt(key.voucher, 10)+"/"+strconv.Itoa(key.seg))
	}
	r.mu.RUnlock()
	slices.Sort(out)
	return out
}
