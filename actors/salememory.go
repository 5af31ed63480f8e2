package actors

import "flashsale/domain"

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
