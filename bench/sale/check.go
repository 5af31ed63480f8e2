package sale

import (
	"fmt"
	"time"
)

// Outcome is one grab as the load tool saw it from outside.
type Outcome struct {
	User    int    `json:"user"`
	Attempt int    `json:"attempt"`
	Code    string `json:"code"`
	// OrderID is set on an OK voucher grab.
	OrderID string `json:"orderId,omitempty"`
	// AmountCents is a red packet's amount on an OK grab.
	AmountCents int64         `json:"amountCents,omitempty"`
	Sent        time.Time     `json:"sent"`
	Latency     time.Duration `json:"latency"`
}

// decided reports whether the answer settles the grab either way. An
// UNAVAILABLE, a transport error or an unreadable body leaves it open:
// the unit may have been sold without the client hearing of it.
func (o Outcome) decided() bool {
	switch o.Code {
	case "OK", "SOLD_OUT", "LIMIT_REACHED", "NOT_FOUND", "NOT_STARTED", "ENDED", "PAUSED",
		"EMPTY", "ALREADY_GRABBED", "EXPIRED":
		return true
	}
	// GraphQL refusals before the grab ran (rate limit, bad token) sold
	// nothing; only an INTERNAL error might have.
	return len(o.Code) > 6 && o.Code[:6] == "error:" && o.Code != "error:INTERNAL"
}

// Expect is what the sale promised.
type Expect struct {
	// Stock is the units on sale (a red packet: its packet count).
	Stock int `json:"stock"`
	// PerUserLimit is the most OKs one user may get.
	PerUserLimit int `json:"perUserLimit"`
	// TotalCents is a red packet's sum; zero for a voucher sale.
	TotalCents int64 `json:"totalCents,omitempty"`
}

// Observed is what the stores said after the sale, each part optional.
type Observed struct {
	// Remaining is the target's live stock answer; nil when not asked.
	Remaining *int
	// Rows are the sale's rows in Postgres; nil when not read.
	Rows []Row
}

// Row is one stored order (or red-packet grab).
type Row struct {
	ID          string
	User        int
	Live        bool
	AmountCents int64
}

// Violation is one broken promise, named by the rule it breaks.
type Violation struct {
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
}

func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// Check judges a sale from its answers and what the stores hold: no more
// OKs than stock, no user over the limit, order ids unique, the live
// stock equal to what was not sold, every OK stored exactly once and no
// stored order nobody was told about. Answers that settled nothing
// (UNAVAILABLE, lost) widen what the stores may hold, never the OKs.
func Check(outs []Outcome, exp Expect, obs Observed) []Violation {
	var vs []Violation
	add := func(rule, format string, args ...any) {
		vs = append(vs, Violation{rule, fmt.Sprintf(format, args...)})
	}
	redPacket := exp.TotalCents > 0
	ok, undecided := 0, 0
	perUser := map[int]int{}
	ids := map[string]int{}
	var cents int64
	for _, o := range outs {
		if !o.decided() {
			undecided++
		}
		if o.Code != "OK" {
			continue
		}
		ok++
		perUser[o.User]++
		if redPacket {
			cents += o.AmountCents
			if o.AmountCents < 1 {
				add("packet-amount", "user %d got %d cents (at least 1)", o.User, o.AmountCents)
			}
			continue
		}
		if o.OrderID == "" {
			add("order-id", "user %d got OK without an order id", o.User)
			continue
		}
		if ids[o.OrderID]++; ids[o.OrderID] == 2 {
			add("unique-order-ids", "order id %s answered more than once", o.OrderID)
		}
	}
	if ok > exp.Stock {
		add("oversell", "%d OK answers for %d units", ok, exp.Stock)
	}
	for u, n := range perUser {
		if n > exp.PerUserLimit {
			add("per-user-limit", "user %d got %d OKs (limit %d)", u, n, exp.PerUserLimit)
		}
	}
	if redPacket {
		if cents > exp.TotalCents {
			add("packet-sum", "%d cents handed out of %d", cents, exp.TotalCents)
		}
		if ok == exp.Stock && undecided == 0 && cents != exp.TotalCents {
			add("packet-sum", "every packet grabbed but %d cents of %d handed out", cents, exp.TotalCents)
		}
	}
	if r := obs.Remaining; r != nil {
		left := exp.Stock - ok
		switch {
		case *r < 0:
			add("stock-query", "remaining %d below zero", *r)
		case *r > left:
			add("stock-query", "remaining %d, but %d of %d units were answered OK", *r, ok, exp.Stock)
		case undecided == 0 && *r != left:
			add("stock-query", "remaining %d, want %d (every answer settled)", *r, left)
		}
	}
	if obs.Rows != nil {
		vs = append(vs, checkRows(outs, exp, obs.Rows, undecided)...)
	}
	return vs
}

// checkRows compares the stored rows with the OK answers.
func checkRows(outs []Outcome, exp Expect, rows []Row, undecided int) []Violation {
	var vs []Violation
	add := func(rule, format string, args ...any) {
		vs = append(vs, Violation{rule, fmt.Sprintf(format, args...)})
	}
	redPacket := exp.TotalCents > 0
	stored := map[string]bool{}
	storedUser := map[int]bool{}
	live, phantoms := 0, 0
	perUser := map[int]int{}
	for _, r := range rows {
		if stored[r.ID] {
			add("db-unique", "row %s stored twice", r.ID)
		}
		stored[r.ID] = true
		storedUser[r.User] = true
		if r.Live {
			live++
			perUser[r.User]++
		}
	}
	answered := map[string]bool{}
	answeredUser := map[int]bool{}
	for _, o := range outs {
		if o.Code != "OK" {
			continue
		}
		answered[o.OrderID] = true
		answeredUser[o.User] = true
		if redPacket {
			if !storedUser[o.User] {
				add("lost-order", "user %d's packet is not in the database", o.User)
			}
		} else if o.OrderID != "" && !stored[o.OrderID] {
			add("lost-order", "order %s (user %d) is not in the database", o.OrderID, o.User)
		}
	}
	for _, r := range rows {
		if (redPacket && !answeredUser[r.User]) || (!redPacket && !answered[r.ID]) {
			phantoms++
		}
	}
	if phantoms > undecided {
		add("phantom-order", "%d stored rows nobody was answered OK for (%d answers unsettled)", phantoms, undecided)
	}
	if live > exp.Stock {
		add("db-oversell", "%d live rows for %d units", live, exp.Stock)
	}
	for u, n := range perUser {
		if n > exp.PerUserLimit {
			add("db-per-user-limit", "user %d holds %d live rows (limit %d)", u, n, exp.PerUserLimit)
		}
	}
	return vs
}
