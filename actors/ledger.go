package actors

import (
	"sync"
	"time"

	"flashsale/domain"
)

// nodeLedger is what this node knows for sure of each voucher's Redis
// stock, for the database fallback: the last state Redis confirmed to each
// of the node's segment activations, less what the node sold since, and
// the script calls that may still sell without the node knowing it — those
// in flight, and those that failed without an answer (undecided). A Redis
// that is stalled, not dead, holds such a call and runs it when it
// resumes, whatever the node told the caller meanwhile; so an undecided
// call stays in the ledger until a newer fencing token of its segment is
// known, which makes Redis refuse it should it ever run.
//
// The fallback sells only beyond what those calls may take: none of their
// users, none of their request ids, and only units left once theirs are
// counted (domain.RedisView.Reserved). Every sale the node makes from
// Redis reaches the confirmed states (a call's answer takes its sales off
// them); when a call leaves the ledger with its effect unknown, the
// voucher's confirmed states are dropped, and the fallback sells nothing
// of it until Redis is read again. A segment's activation is a sequencer
// and a cache; the ledger is the node's, so it outlives an activation, and
// it covers every segment of a voucher: one segment's undecided call
// reserves units of the stock all segments share.
type nodeLedger struct {
	mu       sync.Mutex // guards vouchers, not their contents
	vouchers map[int64]*voucherLedger
}

// voucherLedger is one voucher's part of the ledger.
type voucherLedger struct {
	// sell is held by each database sale of the voucher on this node, so
	// that a sale's view and its outcome are one step.
	sell sync.Mutex
	mu   sync.Mutex // guards seen and calls
	seen map[int]confirmed
	// calls holds the script calls in flight or undecided.
	calls map[*ledgerCall]struct{}
}

// confirmed is a state Redis returned to a segment's activation, less the
// units the node sold since (from Redis or from the database).
type confirmed struct {
	remaining int
	at        time.Time
}

// ledgerCall is one script call of a segment: what it may sell. The
// grabs' users and request ids never change once a grab is made, so the
// call keeps the batch itself: the hot path pays no copy, and only the
// fallback, which is rare, looks inside.
type ledgerCall struct {
	v         *voucherLedger
	seg       int
	batch     []*grabMsg
	undecided bool
}

// holds reports whether the call may sell to g's user or under its
// request id.
func (c *ledgerCall) holds(g *grabMsg) bool {
	for _, b := range c.batch {
		if b.user == g.user || b.req == g.req {
			return true
		}
	}
	return false
}

func newNodeLedger() *nodeLedger { return &nodeLedger{vouchers: map[int64]*voucherLedger{}} }

// voucher returns the voucher's part, made on first use.
func (l *nodeLedger) voucher(id int64) *voucherLedger {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.vouchers[id]
	if v == nil {
		v = &voucherLedger{seen: map[int]confirmed{}, calls: map[*ledgerCall]struct{}{}}
		l.vouchers[id] = v
	}
	return v
}

// peek returns the voucher's part, or nil when the node has none.
func (l *nodeLedger) peek(id int64) *voucherLedger {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.vouchers[id]
}

// begin records a script call of key about to be sent with batch; every
// call begun ends in settle, answered, undecided or superseded.
func (l *nodeLedger) begin(key segKey, batch []*grabMsg) *ledgerCall {
	v := l.voucher(key.voucher)
	c := &ledgerCall{v: v, seg: key.seg, batch: batch}
	v.mu.Lock()
	v.calls[c] = struct{}{}
	v.mu.Unlock()
	return c
}

// settle forgets a call that was never sent.
func (l *nodeLedger) settle(c *ledgerCall) {
	c.v.mu.Lock()
	delete(c.v.calls, c)
	c.v.mu.Unlock()
}

// answered forgets a call Redis answered: the units it sold come off every
// confirmed state of the voucher, and st, the state the call read, is its
// segment's newest confirmed state when trusted.
func (l *nodeLedger) answered(c *ledgerCall, sold int, st domain.VoucherState, trusted bool) {
	v := c.v
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.calls, c)
	v.take(sold)
	if trusted && st.Found {
		v.seen[c.seg] = confirmed{remaining: st.Remaining, at: st.SeenAt}
	}
}

// undecided keeps a call that failed without an answer: Redis may run it
// still, until a newer fence of its segment is known.
func (l *nodeLedger) undecided(c *ledgerCall) {
	c.v.mu.Lock()
	c.undecided = true
	c.v.mu.Unlock()
	undecidedCalls.Inc()
}

// unsure reports whether key has an undecided call: its activation must
// take a new fence before it trusts Redis's state again.
func (l *nodeLedger) unsure(key segKey) bool {
	v := l.peek(key.voucher)
	if v == nil {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.undecidedOf(key.seg)
}

// fenced records that a new fence of key was claimed, with the state Redis
// returned in the same step: no undecided call of key can sell any more,
// and whatever they sold is in st. Read while the node was not trusting
// Redis (an outage, a re-sync), st cannot stand for them: the voucher's
// confirmed states are dropped instead.
func (l *nodeLedger) fenced(key segKey, st domain.VoucherState, trusted bool) {
	v := l.peek(key.voucher)
	if v == nil {
		if !trusted || !st.Found {
			return // nothing to settle, nothing to confirm
		}
		v = l.voucher(key.voucher)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.dropUndecided(key.seg)
	switch {
	case trusted && st.Found:
		v.seen[key.seg] = confirmed{remaining: st.Remaining, at: st.SeenAt}
	case !trusted:
		clear(v.seen)
	}
}

// superseded records that key has a newer fence than the one its calls
// carried (a call was answered Stale): its undecided calls, and c if it
// may have run, can no longer sell, but what they sold is not known, so
// the voucher's confirmed states are dropped when there were any.
func (l *nodeLedger) superseded(c *ledgerCall, mayHaveSold bool) {
	v := c.v
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.calls, c)
	unknown := v.undecidedOf(c.seg) || mayHaveSold
	v.dropUndecided(c.seg)
	if unknown {
		clear(v.seen)
	}
}

// confirm records a state Redis returned for key outside a script call
// (a reload), when trusted.
func (l *nodeLedger) confirm(key segKey, st domain.VoucherState, trusted bool) {
	if !trusted || !st.Found {
		return
	}
	v := l.voucher(key.voucher)
	v.mu.Lock()
	v.seen[key.seg] = confirmed{remaining: st.Remaining, at: st.SeenAt}
	v.mu.Unlock()
}

// fallbackView is what the database may sell of the voucher for g: the
// lowest stock any segment was last told (each read includes every sale
// made before it, and this node's later sales are taken off it, in flight
// or undecided), paired with when that read began, and the units the
// calls in flight or undecided may still take. ok is false when the node
// holds no confirmed state of the voucher, or when g's user or request id
// is in such a call: its answer is coming from Redis, or can only come
// from it.
func (l *nodeLedger) fallbackView(voucherID int64, g *grabMsg) (domain.RedisView, bool) {
	v := l.peek(voucherID)
	if v == nil {
		return domain.RedisView{}, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var view domain.RedisView
	found := false
	for _, c := range v.seen {
		if !found || c.remaining < view.Remaining || c.remaining == view.Remaining && c.at.After(view.SeenAt) {
			view.Remaining, view.SeenAt, found = c.remaining, c.at, true
		}
	}
	for c := range v.calls {
		if c.holds(g) {
			return domain.RedisView{}, false
		}
		view.Reserved += len(c.batch)
	}
	return view, found
}

// soldFromDB takes a unit the database sold off every confirmed state of
// the voucher: the view is Redis's stock less the node's database sales.
func (l *nodeLedger) soldFromDB(voucherID int64) {
	v := l.voucher(voucherID)
	v.mu.Lock()
	v.take(1)
	v.mu.Unlock()
}

// seller returns the lock held by each database sale of the voucher.
func (l *nodeLedger) seller(voucherID int64) *sync.Mutex { return &l.voucher(voucherID).sell }

// take takes n units off every confirmed state; under v.mu.
func (v *voucherLedger) take(n int) {
	if n == 0 {
		return
	}
	for seg, c := range v.seen {
		c.remaining -= n
		v.seen[seg] = c
	}
}

// undecidedOf reports whether seg has an undecided call; under v.mu.
func (v *voucherLedger) undecidedOf(seg int) bool {
	for c := range v.calls {
		if c.seg == seg && c.undecided {
			return true
		}
	}
	return false
}

// dropUndecided forgets seg's undecided calls; under v.mu.
func (v *voucherLedger) dropUndecided(seg int) {
	for c := range v.calls {
		if c.seg == seg && c.undecided {
			delete(v.calls, c)
		}
	}
}
