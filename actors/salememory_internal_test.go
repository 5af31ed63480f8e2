package actors

import (
	"testing"

	"flashsale/domain"
)

// The record's rules as pure logic; the tests against real Redis are in
// salememory_test.go.

func TestARecordStartsOnlyFromAProvenEmptyClaim(t *testing.T) {
	empty := domain.VoucherState{Found: true, Segments: 1, Tally: domain.SalesTally{Counted: true, Load: "L1"}}
	tests := []struct {
		name string
		edit func(*domain.VoucherState)
		want bool
	}{
		{"no sale, no buyer, no hold", func(*domain.VoucherState) {}, true},
		{"a sale already", func(s *domain.VoucherState) { s.Tally.Requests = 1 }, false},
		{"a buyer without a recorded request", func(s *domain.VoucherState) { s.Tally.Buyers = 1 }, false},
		{"a reload holding sales", func(s *domain.VoucherState) { s.Tally.Held = true }, false},
		{"a store without a tally", func(s *domain.VoucherState) { s.Tally.Counted = false }, false},
		{"a voucher split into segments", func(s *domain.VoucherState) { s.Segments = 2 }, false},
		{"an unknown voucher", func(s *domain.VoucherState) { s.Found = false }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := empty
			tc.edit(&st)
			if got := newSaleMemory(st) != nil; got != tc.want {
				t.Fatalf("record started: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestARecordMatchesOnlyTheSameLoadAndCount(t *testing.T) {
	m := newSaleMemory(domain.VoucherState{Found: true, Segments: 1, Tally: domain.SalesTally{Counted: true, Load: "L1"}})
	batch := []*grabMsg{
		{user: 1, req: "u1:a", keyed: true},
		{user: 2, req: "gen:1"},
		{user: 3, req: "u3:c", keyed: true},
		{user: 1, req: "u1:a", keyed: true}, // the retry of user 1's sale: the same order
	}
	ok := domain.GrabResult{Code: domain.SeckillOK, OrderID: 11}
	res := []domain.GrabResult{ok, {Code: domain.SeckillOK, OrderID: 12}, {Code: domain.SeckillSoldOut}, ok}
	if !m.record(batch, res) {
		t.Fatal("a small record outgrew its bound")
	}
	for _, tc := range []struct {
		name  string
		tally domain.SalesTally
		want  bool
	}{
		{"the same load and count", domain.SalesTally{Counted: true, Load: "L1", Requests: 2}, true},
		{"a sale the record lacks", domain.SalesTally{Counted: true, Load: "L1", Requests: 3}, false},
		{"another load with the same count", domain.SalesTally{Counted: true, Load: "L2", Requests: 2}, false},
		{"no tally", domain.SalesTally{Load: "L1", Requests: 2}, false},
		{"another activation's claim", domain.SalesTally{Counted: true, Load: "L1", Requests: 2, Claim: "other"}, false},
	} {
		if got := m.matches(tc.tally); got != tc.want {
			t.Errorf("%s: matches %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestARecordAnswersAsTheScriptOrNotAtAll(t *testing.T) {
	m := newSaleMemory(domain.VoucherState{Found: true, Segments: 1, Tally: domain.SalesTally{Counted: true}})
	m.record([]*grabMsg{{user: 1, req: "u1:a", keyed: true}}, []domain.GrabResult{{Code: domain.SeckillOK, OrderID: 7}})
	tests := []struct {
		name      string
		g         *grabMsg
		refusal   domain.SeckillCode
		remaining int
		want      domain.GrabResult
		decided   bool
	}{
		{"a retry of a sale, even paused", &grabMsg{user: 1, req: "u1:a", keyed: true}, domain.SeckillPaused, 0, domain.GrabResult{Code: domain.SeckillOK, OrderID: 7}, true},
		{"a new key while paused", &grabMsg{user: 2, req: "u2:b", keyed: true}, domain.SeckillPaused, 0, domain.GrabResult{Code: domain.SeckillPaused}, true},
		{"a new key after the sell-out", &grabMsg{user: 2, req: "u2:b", keyed: true}, "", 0, domain.GrabResult{Code: domain.SeckillSoldOut}, true},
		{"a buyer's new key: the script knows the limit", &grabMsg{user: 1, req: "u1:b", keyed: true}, "", 0, domain.GrabResult{}, false},
		{"stock came back: the script sells", &grabMsg{user: 2, req: "u2:b", keyed: true}, "", 1, domain.GrabResult{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, decided := m.answer(tc.g, tc.refusal, tc.remaining, 1)
			if got != tc.want || decided != tc.decided {
				t.Fatalf("answer %+v (decided %v), want %+v (decided %v)", got, decided, tc.want, tc.decided)
			}
		})
	}
}

func TestARecordGivesUpPastItsBound(t *testing.T) {
	m := newSaleMemory(domain.VoucherState{Found: true, Segments: 1, Tally: domain.SalesTally{Counted: true}})
	batch := make([]*grabMsg, saleMemoryMax+1)
	res := make([]domain.GrabResult, len(batch))
	for i := range batch {
		batch[i] = &grabMsg{user: int64(i + 1), req: "gen"}
		res[i] = domain.GrabResult{Code: domain.SeckillOK, OrderID: int64(i + 1)}
	}
	if m.record(batch, res) {
		t.Fatalf("a record of %d buyers was kept, bound %d", len(batch), saleMemoryMax)
	}
}

func TestARecordGivesUpWhenAKeySellsAgainUnderAnotherOrder(t *testing.T) {
	m := newSaleMemory(domain.VoucherState{Found: true, Segments: 1, Tally: domain.SalesTally{Counted: true}})
	g := &grabMsg{user: 1, req: "u1:a", keyed: true}
	if !m.record([]*grabMsg{g}, []domain.GrabResult{{Code: domain.SeckillOK, OrderID: 7}}) {
		t.Fatal("the first sale ended the record")
	}
	if !m.record([]*grabMsg{g}, []domain.GrabResult{{Code: domain.SeckillOK, OrderID: 7}}) {
		t.Fatal("the replay of the sale (the same order) ended the record")
	}
	if m.record([]*grabMsg{g}, []domain.GrabResult{{Code: domain.SeckillOK, OrderID: 8}}) {
		t.Fatal("the key sold again under another order, and the record was kept")
	}
}
