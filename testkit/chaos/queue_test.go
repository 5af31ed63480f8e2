package chaos

import (
	"strings"
	"testing"
	"time"
)

// judgeQueue is the queue kind's eyes: each check must fire on the state
// it names and stay quiet on a clean sale.
func TestJudgeQueueSeesEachBrokenPromise(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	admittedAt := map[int64]time.Duration{1: 0, 2: 0, 3: 10 * time.Millisecond, 4: 20 * time.Millisecond}
	// clean: users 1 and 2 joined early, 3, 4 and 5 after the opening, in
	// that order; the stock (4) served all but 5, who saw SOLD_OUT.
	clean := func() (*roomRun, roomState, []answer, state) {
		run := &roomRun{errs: map[string]int{}}
		rs := roomState{admissions: map[int64]time.Time{}}
		var answers []answer
		var st state
		for i := int64(1); i <= 5; i++ {
			u := &roomUser{id: i, arrival: int(i - 1), joined: true, early: i <= 2}
			first := &roomPlace{State: stateWaiting}
			if u.early {
				first.State = stateEarly
			}
			u.seen = append(u.seen, placeSeen{at: t0, how: "join", place: first})
			if d, ok := admittedAt[i]; ok {
				exp := t0.Add(d + admissionTTL)
				ticket := "t" + string(rune('0'+i))
				u.admitted = &roomPlace{State: stateAdmitted, Ticket: &ticket, ExpiresAt: &exp}
				u.seen = append(u.seen, placeSeen{at: t0.Add(d), how: "place", place: u.admitted})
				rs.admissions[i] = exp
				answers = append(answers, answer{attempt: attempt{user: i}, grabAnswer: grabAnswer{Code: codeOK, OrderID: "1"}})
				st.rows = append(st.rows, orderRow{id: 100 + i, user: i, voucher: 9, created: t0.Add(d + 50*time.Millisecond)})
			} else {
				u.seen = append(u.seen, placeSeen{at: t0.Add(time.Second), how: "place", place: &roomPlace{State: stateSoldOut}})
			}
			run.users = append(run.users, u)
		}
		run.bad = []badGrab{{user: 99, how: "no ticket", grabAnswer: grabAnswer{Err: &gqlErrors{}}}}
		return run, rs, answers, st
	}
	exp := func(d time.Duration) *time.Time { e := t0.Add(d + admissionTTL); return &e }
	ticket := "t"
	cases := []struct {
		name  string
		spoil func(*roomRun, *roomState, *[]answer, *state)
		want  string // "" : no queue check fires
	}{
		{"a clean sale", func(*roomRun, *roomState, *[]answer, *state) {}, ""},
		{"the room emptied", func(_ *roomRun, rs *roomState, _ *[]answer, _ *state) { rs.resets = 1 }, "queue-reset"},
		{"a joined user told no place", func(r *roomRun, _ *roomState, _ *[]answer, _ *state) {
			r.users[4].seen = append(r.users[4].seen, placeSeen{at: t0.Add(2 * time.Second), how: "place"})
		}, "queue-lost"},
		{"a second admission", func(r *roomRun, _ *roomState, _ *[]answer, _ *state) {
			r.users[2].seen = append(r.users[2].seen, placeSeen{at: t0.Add(time.Second), how: "place", place: &roomPlace{State: stateAdmitted, Ticket: &ticket, ExpiresAt: exp(time.Second)}})
		}, "queue-double"},
		{"admitted, then waiting again", func(r *roomRun, _ *roomState, _ *[]answer, _ *state) {
			r.users[2].seen = append(r.users[2].seen, placeSeen{at: t0.Add(time.Second), how: "place", place: &roomPlace{State: stateWaiting}})
		}, "queue-double"},
		{"Redis ends with another admission", func(_ *roomRun, rs *roomState, _ *[]answer, _ *state) {
			rs.admissions[3] = *exp(time.Second)
		}, "queue-double"},
		{"an order of a user never admitted", func(_ *roomRun, _ *roomState, _ *[]answer, st *state) {
			st.rows = append(st.rows, orderRow{id: 199, user: 99, voucher: 9, created: t0})
		}, "queue-admitted"},
		{"an order sold before its admission", func(_ *roomRun, _ *roomState, _ *[]answer, st *state) {
			st.rows[3].created = t0
		}, "queue-admitted"},
		{"a late user admitted before an early one", func(_ *roomRun, rs *roomState, _ *[]answer, _ *state) {
			rs.admissions[2] = *exp(15 * time.Millisecond)
		}, "queue-order"},
		{"late users out of their order", func(_ *roomRun, rs *roomState, _ *[]answer, _ *state) {
			rs.admissions[3], rs.admissions[4] = *exp(20 * time.Millisecond), *exp(10 * time.Millisecond)
		}, "queue-order"},
		{"a late user passed over", func(r *roomRun, rs *roomState, _ *[]answer, _ *state) {
			rs.admissions[5] = *exp(30 * time.Millisecond)
			delete(rs.admissions, 4)
			r.users[3].admitted = nil
			r.users[3].seen = r.users[3].seen[:1]
			r.users[4].seen = r.users[4].seen[:1]
		}, "queue-order"},
		{"out of order, but the join's moment unknown", func(r *roomRun, rs *roomState, _ *[]answer, _ *state) {
			rs.admissions[3], rs.admissions[4] = *exp(20 * time.Millisecond), *exp(10 * time.Millisecond)
			r.users[3].seen[1].place.ExpiresAt = exp(10 * time.Millisecond)
			r.users[2].seen[1].place.ExpiresAt = exp(20 * time.Millisecond)
			r.users[3].unsure = true
		}, ""},
		{"a grab with another user's ticket sold", func(r *roomRun, _ *roomState, _ *[]answer, _ *state) {
			r.bad = append(r.bad, badGrab{user: 5, how: "user 1's ticket", grabAnswer: grabAnswer{Code: codeOK, OrderID: "7"}})
		}, "queue-gate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run, rs, answers, st := clean()
			tc.spoil(run, &rs, &answers, &st)
			var o outcome
			judgeQueue(&o, plan{stock: 4, limit: 1, voucher: 9}, run, rs, answers, st)
			var got []string
			for _, v := range o.violations {
				if strings.HasPrefix(v.check, "queue-") {
					got = append(got, v.check+": "+v.detail)
				}
			}
			if tc.want == "" {
				if len(got) > 0 {
					t.Fatalf("want no queue violation, got %q", got)
				}
				return
			}
			for _, g := range got {
				if strings.HasPrefix(g, tc.want+":") {
					return
				}
			}
			t.Fatalf("want %s, got %q", tc.want, got)
		})
	}
}
