package actors

import (
	"testing"
	"time"

	"flashsale/domain"
)

// The node ledger's rules as pure logic; end to end against a stalled
// Redis and Postgres in the outage tests in e2e/ (e2e/outage_test.go).

var (
	ledgerT0   = time.Unix(1000, 0)
	seg0, seg1 = segKey{voucher: 7, seg: 0}, segKey{voucher: 7, seg: 1}
)

func ledgerState(remaining int, after time.Duration) domain.VoucherState {
	return domain.VoucherState{Found: true, Remaining: remaining, SeenAt: ledgerT0.Add(after)}
}

func ledgerGrab(user int64, req string) *grabMsg { return &grabMsg{user: user, req: req} }

// TestTheLedgerKeepsUndecidedCallsOffTheDatabase: the database fallback's
// view of a voucher on this node: the lowest stock a segment was last told,
// less what the node sold since; the units of calls in flight or undecided
// reserved; their users and request ids refused; an undecided call
// forgotten only once its segment's fence moves on.
func TestTheLedgerKeepsUndecidedCallsOffTheDatabase(t *testing.T) {
	l := newNodeLedger()
	if _, ok := l.fallbackView(7, ledgerGrab(1, "a")); ok {
		t.Fatal("a view of a voucher the node never read")
	}
	l.confirm(seg0, ledgerState(10, 0), true)
	l.confirm(seg1, ledgerState(8, time.Second), true)
	l.confirm(seg0, ledgerState(3, 2*time.Second), false) // re-syncing: not trusted
	if v, ok := l.fallbackView(7, ledgerGrab(1, "a")); !ok || v.Remaining != 8 || !v.SeenAt.Equal(ledgerT0.Add(time.Second)) || v.Reserved != 0 {
		t.Fatalf("view %+v %v; want the lowest trusted read, 8 at t0+1s, nothing reserved", v, ok)
	}

	call := l.begin(seg0, []*grabMsg{ledgerGrab(2, "b"), ledgerGrab(3, "c")})
	if v, ok := l.fallbackView(7, ledgerGrab(1, "a")); !ok || v.Reserved != 2 {
		t.Fatalf("with a call in flight: %+v %v; want 2 reserved", v, ok)
	}
	for _, g := range []*grabMsg{ledgerGrab(2, "x"), ledgerGrab(9, "c")} {
		if _, ok := l.fallbackView(7, g); ok {
			t.Errorf("user %d request %s is in a call in flight, yet the database may sell it", g.user, g.req)
		}
	}
	l.undecided(call)
	if !l.unsure(seg0) || l.unsure(seg1) {
		t.Fatal("only segment 0 has an undecided call")
	}
	if _, ok := l.fallbackView(7, ledgerGrab(2, "y")); ok {
		t.Error("the user of an undecided call may buy from the database")
	}
	l.fenced(seg1, ledgerState(8, 3*time.Second), true) // another segment's fence: changes nothing
	if v, _ := l.fallbackView(7, ledgerGrab(1, "a")); v.Reserved != 2 {
		t.Fatalf("another segment's new fence settled the call: %+v", v)
	}
	l.soldFromDB(7)
	if v, _ := l.fallbackView(7, ledgerGrab(1, "a")); v.Remaining != 7 {
		t.Fatalf("after a database sale: remaining %d, want 7", v.Remaining)
	}
	l.fenced(seg0, ledgerState(6, 4*time.Second), true)
	if v, ok := l.fallbackView(7, ledgerGrab(2, "b")); !ok || v.Reserved != 0 || v.Remaining != 6 || l.unsure(seg0) {
		t.Fatalf("after segment 0's new fence: %+v %v unsure %v; want its read, nothing reserved", v, ok, l.unsure(seg0))
	}
	unsent := l.begin(seg1, []*grabMsg{ledgerGrab(4, "d")})
	l.settle(unsent)
	if v, _ := l.fallbackView(7, ledgerGrab(4, "d")); v.Reserved != 0 {
		t.Fatalf("a call never sent still reserves: %+v", v)
	}
}

// TestTheLedgerNeverForgetsASaleItCannotSee: every way a call leaves the
// ledger keeps the view at or below Redis's stock: an answer takes its
// sales off even when its state cannot be trusted (read across an
// outage), and a call whose effect is unknown drops the voucher's view
// until Redis is read again.
func TestTheLedgerNeverForgetsASaleItCannotSee(t *testing.T) {
	fresh := func() *nodeLedger {
		l := newNodeLedger()
		l.confirm(seg0, ledgerState(10, 0), true)
		l.confirm(seg1, ledgerState(12, 0), true)
		return l
	}
	tests := []struct {
		name string
		run  func(l *nodeLedger)
		// remaining is the view wanted after run; -1: no view at all.
		remaining int
	}{
		{"an answer read across an outage still takes its sales off", func(l *nodeLedger) {
			c := l.begin(seg0, []*grabMsg{ledgerGrab(2, "b")})
			l.answered(c, 1, ledgerState(9, time.Second), false)
		}, 9},
		{"a trusted answer is its segment's newest read", func(l *nodeLedger) {
			c := l.begin(seg1, []*grabMsg{ledgerGrab(2, "b"), ledgerGrab(3, "c")})
			l.answered(c, 2, ledgerState(5, time.Second), true)
		}, 5},
		{"a new fence read while the node does not trust redis drops the view", func(l *nodeLedger) {
			l.undecided(l.begin(seg0, []*grabMsg{ledgerGrab(2, "b")}))
			l.fenced(seg0, ledgerState(9, time.Second), false)
		}, -1},
		{"a stale answer after an attempt that may have sold drops the view", func(l *nodeLedger) {
			l.superseded(l.begin(seg0, []*grabMsg{ledgerGrab(2, "b")}), true)
		}, -1},
		{"a stale answer ends an older undecided call of the segment, and the view", func(l *nodeLedger) {
			l.undecided(l.begin(seg0, []*grabMsg{ledgerGrab(2, "b")}))
			l.superseded(l.begin(seg0, []*grabMsg{ledgerGrab(3, "c")}), false)
		}, -1},
		{"a stale answer that sold nothing keeps the view", func(l *nodeLedger) {
			l.superseded(l.begin(seg0, []*grabMsg{ledgerGrab(3, "c")}), false)
		}, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := fresh()
			tc.run(l)
			v, ok := l.fallbackView(7, ledgerGrab(1, "a"))
			switch {
			case tc.remaining < 0 && ok:
				t.Fatalf("view %+v; want none until redis is read again", v)
			case tc.remaining >= 0 && (!ok || v.Remaining != tc.remaining || v.Reserved != 0):
				t.Fatalf("view %+v %v; want %d left, nothing reserved", v, ok, tc.remaining)
			}
			if l.unsure(seg0) {
				t.Fatal("segment 0 still unsure")
			}
		})
	}
}
