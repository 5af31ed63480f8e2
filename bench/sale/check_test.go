package sale

import (
	"reflect"
	"slices"
	"testing"
)

// honestSale is a canned sale of 3 units to 5 users, one attempt each:
// users 1-3 got orders 11-13, users 4-5 were told SOLD_OUT; the stock
// query says 0 and the database holds the three orders.
func honestSale() ([]Outcome, Expect, Observed) {
	outs := []Outcome{
		{User: 1, Code: "OK", OrderID: "11"},
		{User: 2, Code: "OK", OrderID: "12"},
		{User: 3, Code: "OK", OrderID: "13"},
		{User: 4, Code: "SOLD_OUT"},
		{User: 5, Code: "SOLD_OUT"},
	}
	zero := 0
	rows := []Row{{ID: "11", User: 1, Live: true}, {ID: "12", User: 2, Live: true}, {ID: "13", User: 3, Live: true}}
	return outs, Expect{Stock: 3, PerUserLimit: 1}, Observed{Remaining: &zero, Rows: rows}
}

func intp(n int) *int { return &n }

func TestCheckJudgesCannedSales(t *testing.T) {
	tests := []struct {
		name   string
		doctor func(outs *[]Outcome, exp *Expect, obs *Observed)
		want   []string // rules broken, sorted
	}{
		{"an honest sale passes", func(*[]Outcome, *Expect, *Observed) {}, nil},
		{"a fourth OK for three units is an oversell", func(outs *[]Outcome, _ *Expect, obs *Observed) {
			(*outs)[3] = Outcome{User: 4, Code: "OK", OrderID: "14"}
			obs.Rows = append(obs.Rows, Row{ID: "14", User: 4, Live: true})
			obs.Remaining = intp(0)
		}, []string{"db-oversell", "oversell", "stock-query"}},
		{"an OK the database never got is lost", func(_ *[]Outcome, _ *Expect, obs *Observed) {
			obs.Rows = obs.Rows[:2]
		}, []string{"lost-order"}},
		{"a row nobody was told about is a phantom", func(_ *[]Outcome, exp *Expect, obs *Observed) {
			exp.Stock = 4
			obs.Remaining = intp(1)
			obs.Rows = append(obs.Rows, Row{ID: "99", User: 5, Live: true})
		}, []string{"phantom-order"}},
		{"a row is allowed for an answer that settled nothing", func(outs *[]Outcome, exp *Expect, obs *Observed) {
			exp.Stock = 4
			(*outs)[4].Code = "UNAVAILABLE"
			obs.Remaining = intp(0)
			obs.Rows = append(obs.Rows, Row{ID: "99", User: 5, Live: true})
		}, nil},
		{"a second OK for one user breaks the limit", func(outs *[]Outcome, exp *Expect, obs *Observed) {
			exp.Stock = 4
			*outs = append(*outs, Outcome{User: 1, Attempt: 1, Code: "OK", OrderID: "15"})
			obs.Rows = append(obs.Rows, Row{ID: "15", User: 1, Live: true})
		}, []string{"db-per-user-limit", "per-user-limit"}},
		{"one order id answered twice", func(outs *[]Outcome, _ *Expect, _ *Observed) {
			(*outs)[1].OrderID = "11"
		}, []string{"phantom-order", "unique-order-ids"}},
		{"an OK without an order id", func(outs *[]Outcome, _ *Expect, obs *Observed) {
			(*outs)[2].OrderID = ""
		}, []string{"order-id", "phantom-order"}},
		{"stock above what is left", func(_ *[]Outcome, _ *Expect, obs *Observed) {
			obs.Remaining = intp(1)
		}, []string{"stock-query"}},
		{"stock below what is left when every answer settled", func(_ *[]Outcome, exp *Expect, obs *Observed) {
			exp.Stock = 4
			obs.Remaining = intp(0)
		}, []string{"stock-query"}},
		{"stock below what is left is allowed after an unsettled answer", func(outs *[]Outcome, exp *Expect, obs *Observed) {
			exp.Stock = 4
			(*outs)[4].Code = LabelTransport
			obs.Remaining = intp(0)
		}, nil},
		{"stock below zero", func(_ *[]Outcome, _ *Expect, obs *Observed) {
			obs.Remaining = intp(-1)
		}, []string{"stock-query"}},
		{"without stores only the answers are judged", func(outs *[]Outcome, _ *Expect, obs *Observed) {
			*obs = Observed{}
			(*outs)[3] = Outcome{User: 4, Code: "OK", OrderID: "14"}
		}, []string{"oversell"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outs, exp, obs := honestSale()
			tc.doctor(&outs, &exp, &obs)
			if got := rules(Check(outs, exp, obs)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("broken rules %v, want %v; violations: %v", got, tc.want, Check(outs, exp, obs))
			}
		})
	}
}

func TestCheckJudgesRedPackets(t *testing.T) {
	sale := func() ([]Outcome, Expect, Observed) {
		outs := []Outcome{
			{User: 1, Code: "OK", AmountCents: 60},
			{User: 2, Code: "OK", AmountCents: 40},
			{User: 3, Code: "EMPTY"},
			{User: 1, Attempt: 1, Code: "ALREADY_GRABBED"},
		}
		rows := []Row{{ID: "0", User: 1, Live: true, AmountCents: 60}, {ID: "1", User: 2, Live: true, AmountCents: 40}}
		return outs, Expect{Stock: 2, PerUserLimit: 1, TotalCents: 100}, Observed{Rows: rows}
	}
	tests := []struct {
		name   string
		doctor func(outs []Outcome, obs *Observed)
		want   []string
	}{
		{"every packet grabbed once passes", func([]Outcome, *Observed) {}, nil},
		{"more cents than the packet holds", func(outs []Outcome, _ *Observed) { outs[1].AmountCents = 41 }, []string{"packet-sum"}},
		{"fewer cents when every packet is gone", func(outs []Outcome, _ *Observed) { outs[1].AmountCents = 39 }, []string{"packet-sum"}},
		{"an empty packet", func(outs []Outcome, _ *Observed) { outs[0].AmountCents, outs[1].AmountCents = 0, 100 }, []string{"packet-amount"}},
		{"two packets for one user", func(outs []Outcome, obs *Observed) {
			outs[3] = Outcome{User: 1, Attempt: 1, Code: "OK", AmountCents: 0}
			outs[0].AmountCents = 60
		}, []string{"oversell", "packet-amount", "per-user-limit"}},
		{"a grab the database lost", func(_ []Outcome, obs *Observed) { obs.Rows = obs.Rows[:1] }, []string{"lost-order"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outs, exp, obs := sale()
			tc.doctor(outs, &obs)
			if got := rules(Check(outs, exp, obs)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("broken rules %v, want %v; violations: %v", got, tc.want, Check(outs, exp, obs))
			}
		})
	}
}

// rules lists the distinct rules broken, sorted; nil for none.
func rules(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		if !slices.Contains(out, v.Rule) {
			out = append(out, v.Rule)
		}
	}
	slices.Sort(out)
	return out
}
