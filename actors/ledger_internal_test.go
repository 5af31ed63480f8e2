package actors

import (
	"testing"
	"time"

	"flashsale/domain"
)

// TestTheLedgerKeepsUndecidedCallsOffTheDatabase: the database fallback's
// view of a voucher on this node: the lowest stock a segment was last told,
// less what the database sold since; the units of calls in flight or
// undecided reserved; their users and request ids refused; an undecided
// call forgotten only once its segment claims a new fence.
func TestTheLedgerKeepsUndecidedCallsOffTheDatabase(t *testing.T) {
	t0 := time.Unix(1000, 0)
	seg0, seg1 := segKey{voucher: 7, seg: 0}, segKey{voucher: 7, seg: 1}
	state := func(remaining int, at time.Time) domain.VoucherState {
		return domain.VoucherState{Found: true, Remaining: remaining, SeenAt: at}
	}
	grab := func(user int64, req string) *grabMsg { return &grabMsg{user: user, req: req} }
	l := newNodeLedger()
	if _, ok := l.fallbackView(7, grab(1, "a")); ok {
		t.Fatal("a view of a voucher the node never read")
	}
	l.confirm(seg0, state(10, t0), true)
	l.confirm(seg1, state(8, t0.Add(time.Second)), true)
	l.confirm(seg0, state(3, t0.Add(2*time.Second)), false) // re-syncing: not trusted
	if v, ok := l.fallbackView(7, grab(1, "a")); !ok || v.Remaining != 8 || !v.SeenAt.Equal(t0.Add(time.Second)) || v.Reserved != 0 {
		t.Fatalf("view %+v %v; want the lowest trusted read, 8 at t0+1s, nothing reserved", v, ok)
	}

	call := l.begin(seg0, []*grabMsg{grab(2, "b"), grab(3, "c")})
	if v, ok := l.fallbackView(7, grab(1, "a")); !ok || v.Reserved != 2 {
		t.Fatalf("with a call in flight: %+v %v; want 2 reserved", v, ok)
	}
	for _, g := range []*grabMsg{grab(2, "x"), grab(9, "c")} {
		if _, ok := l.fallbackView(7, g); ok {
			t.Errorf("user %d request %s is in a call in flight, yet the database may sell it", g.user, g.req)
		}
	}
	l.undecided(call)
	if !l.unsure(seg0) || l.unsure(seg1) {
		t.Fatal("only segment 0 has an undecided call")
	}
	if _, ok := l.fallbackView(7, grab(2, "y")); ok {
		t.Error("the user of an undecided call may buy from the database")
	}
	l.fenced(seg1, state(8, t0.Add(3*time.Second)), true) // another segment's fence: changes nothing
	if v, _ := l.fallbackView(7, grab(1, "a")); v.Reserved != 2 {
		t.Fatalf("another segment's new fence settled the call: %+v", v)
	}
	l.soldFromDB(7)
	if v, _ := l.fallbackView(7, grab(1, "a")); v.Remaining != 7 {
		t.Fatalf("after a database sale: remaining %d, want 7", v.Remaining)
	}
	l.fenced(seg0, state(6, t0.Add(4*time.Second)), true)
	if v, ok := l.fallbackView(7, grab(2, "b")); !ok || v.Reserved != 0 || v.Remaining != 6 || l.unsure(seg0) {
		t.Fatalf("after segment 0's new fence: %+v %v unsure %v; want its read, nothing reserved", v, ok, l.unsure(seg0))
	}
	settled := l.begin(seg1, []*grabMsg{grab(4, "d")})
	l.settle(settled)
	if v, _ := l.fallbackView(7, grab(4, "d")); v.Reserved != 0 {
		t.Fatalf("a settled call still reserves: %+v", v)
	}
}
