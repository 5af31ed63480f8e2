package actors

import (
	"time"

	"flashsale/domain"
)

// saleMemory is an activation's record of every sale of its voucher, kept
// so that a keyed grab after the sell-out can be answered without the
// grab script looking its key up, one at a time, in Redis
// (docs/DECISIONS.md, "Keyed grabs after the sell-out from a proven
// record").
//
// The record starts empty, and only when the claim found no sale at all
// and no reload holding sales; it then learns each sale from the outcomes
// of its own script calls. It is never trusted on its own: a keyed grab
// is answered from it only after a script call of the same activation,
// made after the grab arrived, returned a tally (domain.SalesTally) that
// equals the record's: as many request ids sold as the record holds, and
// the same load, and the claim nonce still this activation's. Request ids
// are only ever added to a load (a reload changes the stamp) while Redis
// keeps what it wrote, so equal counts mean equal sets: nobody else sold
// anything the record lacks, whatever the fences, leases and clocks did.
// Should Redis go back in time, its request ids may have been taken back;
// a second activation that sells the same number of other keys must then
// have claimed after it did, and its claim nonce ends the proof; this
// activation itself can refill the count only by selling a key it
// recorded again, under a new order id, which ends it too (record).
// A call that may have sold without saying so (failed, stale, fallback)
// drops the record for good; so does a tally that disagrees.
type saleMemory struct {
	load string
	// claim is the nonce of this activation's claim (SalesTally.Claim).
	claim string
	// keyed maps each client key (the script's request id, "u<user>:<key>")
	// that sold to its order id.
	keyed map[string]int64
	// unkeyed counts the sales of grabs without a client key; their
	// generated request ids are never asked for again.
	unkeyed int64
	// bought counts, per user, the orders this record saw them buy: an
	// upper bound of what Redis counts (a cancellation lowers that), so a
	// user below the limit here is below it there.
	bought map[int64]int
}

// saleMemoryMax bounds a record (entries of keyed plus bought): a larger
// sale is answered by the script as before, and its memory given back.
const saleMemoryMax = 200_000

// newSaleMemory returns an empty record for an activation whose claim
// read st, or nil when the claim cannot vouch for an empty start: sales
// or buyers exist already, a reload holds sales (orders of the lost load
// may still be adopted), or the store keeps no tally. A voucher split
// into segments gets none either: the tally counts every segment's sales,
// so a sibling's first sale would drop the record anyway.
func newSaleMemory(st domain.VoucherState) *saleMemory {
	t := st.Tally
	if !st.Found || st.Segments > 1 || !t.Counted || t.Requests != 0 || t.Buyers != 0 || t.Held {
		return nil
	}
	return &saleMemory{load: t.Load, claim: t.Claim, keyed: map[string]int64{}, bought: map[int64]int{}}
}

// record learns the sales among a script call's results (res[i] answers
// batch[i]) and reports whether the record still holds: false when it
// outgrew saleMemoryMax, or when a key the record holds sold again under
// another order id (Redis forgot that sale and sold the key anew: the
// sets differ while the counts may agree again). A result OK of a
// grab whose key the record holds, with the same order id, is the replay
// of that sale. The caller drops the
// record instead when a grab of the batch was in a script call before
// (batchDone.resent): an unkeyed one may be the replay of a sale the
// record never saw, and counted as new it could make up, in the count,
// for another sale the record lacks.
func (m *saleMemory) record(batch []*grabMsg, res []domain.GrabResult) bool {
	for i, g := range batch {
		if res[i].Code != domain.SeckillOK {
			continue
		}
		if g.keyed {
			if id, seen := m.keyed[g.req]; seen {
				if id != res[i].OrderID {
					// Redis sold the key again under another order: it
					// forgot a sale the record holds, and counting this
					// one as the replay would make the counts agree again.
					return false
				}
				continue
			}
			m.keyed[g.req] = res[i].OrderID
		} else {
			m.unkeyed++
		}
		m.bought[g.user]++
	}
	return len(m.keyed)+len(m.bought) <= saleMemoryMax
}

// matches reports whether a tally read by a script call equals the
// record: then the record holds every sale of the load. The claim nonce
// must still be this activation's: after another claim, equal counts
// prove nothing if Redis went back in time between the two (the second
// may hold the same fence and have sold the same number of other keys).
func (m *saleMemory) matches(t domain.SalesTally) bool {
	return t.Counted && t.Load == m.load && t.Claim == m.claim && t.Requests == int64(len(m.keyed))+m.unkeyed
}

// answer decides a keyed grab that no script call has seen, as the grab
// script would at the moment of the call whose tally matched the record:
// refusal and remaining are what that call saw, limit the voucher's
// per-user limit. ok is false when the script must decide: the grab may
// buy, or its user may be at the limit.
func (m *saleMemory) answer(g *grabMsg, refusal domain.SeckillCode, remaining, limit int) (domain.GrabResult, bool) {
	if id, sold := m.keyed[g.req]; sold {
		return domain.GrabResult{Code: domain.SeckillOK, OrderID: id}, true
	}
	switch {
	case refusal != "":
		return domain.GrabResult{Code: refusal}, true
	case limit < 1 || m.bought[g.user] >= limit:
		return domain.GrabResult{}, false // LIMIT_REACHED, unless a cancellation gave the slot back
	case remaining <= 0:
		return domain.GrabResult{Code: domain.SeckillSoldOut}, true
	}
	return domain.GrabResult{}, false
}

// userRates is a segment activation's per-user grab rate limit
// (RATE_USER_PER_SEC), kept in the activation's memory with no Redis
// call: every grab of a user for a voucher goes to the user's one segment
// (hash(user) mod S), and the segment has one activation under its lease,
// so this memory sees all of that user's grabs for the voucher, on every
// node. It is the generic cell rate algorithm as redis_rate computes it
// (redis_rate.PerSecond: a burst of one second's rate, then one grab per
// 1/rate), so a client sees the same admissions and retryAfterMs as when
// the limit lived in Redis. What it gives up, written down in
// docs/DECISIONS.md ("Rate limits: redis_rate per batch; the per-user
// rate limit in the segment's memory"):
// the limit is per user and voucher rather than per user across
// vouchers, and a new activation (a member joins or dies) starts every
// user with a full burst.
type userRates struct {
	interval int64 // nanoseconds between grabs at the steady rate
	burst    int64 // how far ahead of now a user's arrival time may run
	// tat is each recent user's theoretical arrival time (unix ns); a user
	// whose time has passed is as a new one and is forgotten by sweep.
	tat   map[int64]int64
	swept int64
}

// newUserRates returns the limit for perSec grabs a second, nil when off.
func newUserRates(perSec int) *userRates {
	if perSec <= 0 {
		return nil
	}
	interval := int64(time.Second) / int64(perSec)
	return &userRates{interval: interval, burst: interval * int64(perSec), tat: map[int64]int64{}}
}

// take admits one grab of user at now (unix ns) and returns 0, or returns
// how long until the user may grab again and admits nothing.
func (u *userRates) take(user, now int64) time.Duration {
	next := max(u.tat[user], now) + u.interval
	if wait := next - now - u.burst; wait > 0 {
		return time.Duration(wait)
	}
	u.tat[user] = next
	u.sweep(now)
	return 0
}

// sweep forgets, at most once a second, the users whose arrival time has
// passed, so that the map holds about the users of the last second rather
// than everyone who ever grabbed.
func (u *userRates) sweep(now int64) {
	if now-u.swept < int64(time.Second) {
		return
	}
	u.swept = now
	for user, t := range u.tat {
		if t <= now {
			delete(u.tat, user)
		}
	}
}
