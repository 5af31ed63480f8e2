package actors

import (
	"sync"
	"time"

	"flashsale/domain"
)

// nodeLedger is what this node knows for sure of each voucher's Redis
// stock, for the database fallback: the last state Redis confirmed to each
// of the node's segment activations, and the script calls that may still
// sell without the node knowing it — those in flight, and those that
// failed without an answer (undecided). A Redis that is stalled, not dead,
// holds such a call and runs it when it resumes, whatever the node told
// the caller meanwhile; so an undecided call stays in the ledger until a
// new fencing token for its segment is claimed, which makes Redis refuse
// it should it ever run.
//
// The fallback sells only beyond what those calls may take: none of their
// users, none of their request ids, and only units left once theirs are
// counted (domain.RedisView.Reserved). A segment's activation is a
// sequencer and a cache; the ledger is the node's, so it outlives an
// activation, and it covers every segment of a voucher: one segment's
// undecided call reserves units of the stock all segments share.
type nodeLedger struct {
	mu       sync.Mutex
	vouchers map[int64]*voucherLedger
}

// voucherLedger is one voucher's part of the ledger (fields under
// nodeLedger.mu, but for sell).
type voucherLedger struct {
	// sell is held by each database sale of the voucher on this node, so
	// that a sale's view and its outcome are one step.
	sell sync.Mutex
	seen map[int]confirmed
	// calls holds the script calls in flight or undecided.
	calls map[*ledgerCall]struct{}
}

// confirmed is a state Redis returned to a segment's activation.
type confirmed struct {
	remaining int
	at        time.Time
}

// ledgerCall is one script call of a segment: what it may sell. The
// grabs' users and request ids never change once a grab is made, so the
// call keeps the batch itself: the hot path pays no copy, and only the
// fallback, which is rare, looks inside.
type ledgerCall struct {
	voucher   int64
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

// voucher returns key's voucher part; under l.mu.
func (l *nodeLedger) voucher(id int64) *voucherLedger {
	v := l.vouchers[id]
	if v == nil {
		v = &voucherLedger{seen: map[int]confirmed{}, calls: map[*ledgerCall]struct{}{}}
		l.vouchers[id] = v
	}
	return v
}

// begin records a script call of key about to be sent with batch; every
// call begun ends in settle or undecided.
func (l *nodeLedger) begin(key segKey, batch []*grabMsg) *ledgerCall {
	c := &ledgerCall{voucher: key.voucher, seg: key.seg, batch: batch}
	l.mu.Lock()
	l.voucher(key.voucher).calls[c] = struct{}{}
	l.mu.Unlock()
	return c
}

// settle forgets a call whose outcome is known: it answered, or it was
// never sent.
func (l *nodeLedger) settle(c *ledgerCall) {
	l.mu.Lock()
	delete(l.voucher(c.voucher).calls, c)
	l.mu.Unlock()
}

// undecided keeps a call that failed without an answer: Redis may run it
// still, until its segment's fence moves on (fenced).
func (l *nodeLedger) undecided(c *ledgerCall) {
	l.mu.Lock()
	c.undecided = true
	l.mu.Unlock()
	undecidedCalls.Inc()
}

// unsure reports whether key has an undecided call: its activation must
// claim a new fence before it trusts Redis's state again.
func (l *nodeLedger) unsure(key segKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.vouchers[key.voucher]
	if v == nil {
		return false
	}
	for c := range v.calls {
		if c.seg == key.seg && c.undecided {
			return true
		}
	}
	return false
}

// fenced records that a new fence of key was claimed, with the state
// Redis returned: no undecided call of key can sell any more.
func (l *nodeLedger) fenced(key segKey, st domain.VoucherState, trusted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.voucher(key.voucher)
	for c := range v.calls {
		if c.seg == key.seg && c.undecided {
			delete(v.calls, c)
		}
	}
	if trusted {
		v.seen[key.seg] = confirmed{remaining: st.Remaining, at: st.SeenAt}
	}
}

// confirm records a state Redis returned for key. trusted is false while
// the node re-syncs Redis after an outage: Redis does not hold the
// database's sales yet, and its stock would hide them.
func (l *nodeLedger) confirm(key segKey, st domain.VoucherState, trusted bool) {
	if !trusted || !st.Found {
		return
	}
	l.mu.Lock()
	l.voucher(key.voucher).seen[key.seg] = confirmed{remaining: st.Remaining, at: st.SeenAt}
	l.mu.Unlock()
}

// fallbackView is what the database may sell of the voucher for g: the
// lowest stock any segment was last told (each read includes every sale
// made before it, and this node's later sales are confirmed, in flight or
// undecided), paired with when that read began, and the units the calls in
// flight or undecided may still take. ok is false when the node knows no
// state of the voucher, or when g's user or request id is in such a call:
// its answer is coming from Redis, or can only come from it.
func (l *nodeLedger) fallbackView(voucherID int64, g *grabMsg) (domain.RedisView, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.voucher(voucherID)
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
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.voucher(voucherID)
	for seg, c := range v.seen {
		c.remaining--
		v.seen[seg] = c
	}
}

// seller returns the lock held by each database sale of the voucher.
func (l *nodeLedger) seller(voucherID int64) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &l.voucher(voucherID).sell
}
