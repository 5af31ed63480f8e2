package sale

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// arrivals: users 1..early joined early (at once), the rest one after
// another, each answered 5 ms after it was sent, 10 ms apart.
func arrivals(early, late int) []Arrival {
	var as []Arrival
	for u := 1; u <= early; u++ {
		as = append(as, Arrival{User: u, Early: true, Sent: ms(0), Answered: ms(5)})
	}
	for i := range late {
		as = append(as, Arrival{User: early + 1 + i, Sent: ms(1000 + 10*i), Answered: ms(1005 + 10*i)})
	}
	return as
}

func listed(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.String())
	}
	return strings.Join(s, "; ")
}

func TestCheckEarlyFirst(t *testing.T) {
	as := arrivals(3, 3)
	for _, tc := range []struct {
		name     string
		admitted map[int]time.Time
		fails    bool
	}{
		{"early ones first, later ones after", map[int]time.Time{1: ms(2000), 2: ms(2000), 3: ms(2100), 4: ms(2100), 5: ms(2200)}, false},
		{"the same pacer run admits early and late at one instant", map[int]time.Time{1: ms(2000), 2: ms(2000), 3: ms(2000), 4: ms(2000)}, false},
		{"only early ones admitted: nothing to compare", map[int]time.Time{2: ms(2000)}, false},
		{"an early one after a later arrival", map[int]time.Time{1: ms(2000), 2: ms(2000), 3: ms(2300), 4: ms(2100)}, true},
		{"an early one skipped for a later arrival", map[int]time.Time{1: ms(2000), 2: ms(2000), 4: ms(2100)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := CheckEarlyFirst(as, tc.admitted)
			if got := len(vs) > 0; got != tc.fails {
				t.Fatalf("violations %q, want failing %v", listed(vs), tc.fails)
			}
		})
	}
}

func TestCheckArrivalOrder(t *testing.T) {
	as := arrivals(0, 4) // users 1..4, one after another
	// Users 5 and 6 joined at once (overlapping): either order is fair.
	as = append(as, Arrival{User: 5, Sent: ms(2000), Answered: ms(2010)}, Arrival{User: 6, Sent: ms(2001), Answered: ms(2009)})
	for _, tc := range []struct {
		name     string
		admitted map[int]time.Time
		fails    bool
	}{
		{"in order of arrival", map[int]time.Time{1: ms(3000), 2: ms(3000), 3: ms(3100), 4: ms(3200), 5: ms(3300)}, false},
		{"the head only", map[int]time.Time{1: ms(3000), 2: ms(3000)}, false},
		{"overlapping joins admitted in either order", map[int]time.Time{1: ms(3000), 2: ms(3000), 3: ms(3000), 4: ms(3000), 6: ms(3100), 5: ms(3200)}, false},
		{"a later arrival before an earlier one", map[int]time.Time{1: ms(3000), 2: ms(3200), 3: ms(3100)}, true},
		{"an earlier arrival skipped", map[int]time.Time{1: ms(3000), 3: ms(3100)}, true},
		{"the last admitted before the three who came first", map[int]time.Time{4: ms(3000)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := CheckArrivalOrder(as, tc.admitted)
			if got := len(vs) > 0; got != tc.fails {
				t.Fatalf("violations %q, want failing %v", listed(vs), tc.fails)
			}
		})
	}
}

func TestCheckPace(t *testing.T) {
	every := func(n, stepMs int) []time.Time {
		var ts []time.Time
		for i := range n {
			ts = append(ts, ms(i*stepMs))
		}
		return ts
	}
	burst := append(every(10, 0), every(1, 1000)...) // a second's worth at once
	for _, tc := range []struct {
		name  string
		times []time.Time
		rate  int
		fails bool
	}{
		{"at the pace", every(100, 100), 10, false},
		{"a burst of one second's worth, then the pace", append(every(10, 0), ms(100), ms(200), ms(300)), 10, false},
		{"a burst and one more after a second", burst, 10, false},
		{"twice the pace", every(100, 50), 10, true},
		{"a burst of two seconds' worth", every(22, 0), 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := CheckPace(tc.times, tc.rate)
			if got := len(vs) > 0; got != tc.fails {
				t.Fatalf("violations %q, want failing %v", listed(vs), tc.fails)
			}
		})
	}
}

func TestMostOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tickets []Ticket
		most    int
		fails   bool // with maxActive 2
	}{
		{"one after another", []Ticket{{1, ms(0), ms(100)}, {2, ms(100), ms(200)}, {3, ms(200), ms(300)}}, 1, false},
		{"two open, a third after a sale freed a slot", []Ticket{{1, ms(0), ms(100)}, {2, ms(0), ms(500)}, {3, ms(100), ms(500)}}, 2, false},
		{"a ticket used before its admission is never open", []Ticket{{1, ms(0), ms(500)}, {2, ms(0), ms(500)}, {3, ms(100), ms(50)}}, 2, false},
		{"three open at once", []Ticket{{1, ms(0), ms(500)}, {2, ms(100), ms(500)}, {3, ms(200), ms(300)}}, 3, true},
		{"expiries hold slots", []Ticket{{1, ms(0), ms(120_000)}, {2, ms(0), ms(120_000)}, {3, ms(60_000), ms(60_100)}}, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			most, vs := CheckMostOpen(tc.tickets, 2)
			if most != tc.most || (len(vs) > 0) != tc.fails {
				t.Fatalf("most open %d, violations %q; want %d, failing %v", most, listed(vs), tc.most, tc.fails)
			}
		})
	}
}

func TestCheckAdmittedBuyers(t *testing.T) {
	admitted := map[int]time.Time{1: ms(0)}
	for _, tc := range []struct {
		name  string
		outs  []Outcome
		fails bool
	}{
		{"an admitted buyer, and a refused stranger", []Outcome{{User: 1, Code: "OK", OrderID: "9"}, {User: 2, Code: "error:FORBIDDEN"}}, false},
		{"a stranger bought", []Outcome{{User: 1, Code: "OK", OrderID: "9"}, {User: 2, Code: "OK", OrderID: "10"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := CheckAdmittedBuyers(tc.outs, admitted)
			if got := len(vs) > 0; got != tc.fails {
				t.Fatalf("violations %q, want failing %v", listed(vs), tc.fails)
			}
		})
	}
}

func TestSoldOutNotices(t *testing.T) {
	last := ms(10_000)
	admitted := map[int]time.Time{1: ms(0)}
	for _, tc := range []struct {
		name         string
		watchers     []Watcher
		timed, after int
		fails        bool
	}{
		{"every waiting one within the second; the admitted one not counted",
			[]Watcher{{1, ms(0), time.Time{}}, {2, ms(0), ms(10_200)}, {3, ms(5000), ms(10_900)}}, 2, 0, false},
		{"one subscribed after the last unit: not timed",
			[]Watcher{{2, ms(0), ms(10_200)}, {3, ms(12_000), ms(12_000)}}, 1, 1, false},
		{"one heard it late", []Watcher{{2, ms(0), ms(10_200)}, {3, ms(0), ms(11_200)}}, 2, 0, true},
		{"one never heard it", []Watcher{{2, ms(0), ms(10_200)}, {3, ms(0), time.Time{}}}, 1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, vs := SoldOutNotices(tc.watchers, admitted, last, time.Second)
			if n.Timed != tc.timed || n.After != tc.after || (len(vs) > 0) != tc.fails {
				t.Fatalf("%+v, violations %q; want %d timed, %d after, failing %v", n, listed(vs), tc.timed, tc.after, tc.fails)
			}
		})
	}
}

func TestCheckSoldExactly(t *testing.T) {
	zero, two := 0, 2
	for _, tc := range []struct {
		name             string
		ok, stock, users int
		obs              Observed
		fails            bool
	}{
		{"all sold", 10, 10, 100, Observed{Remaining: &zero}, false},
		{"fewer users than units: some left is fine", 5, 10, 5, Observed{Remaining: &two}, false},
		{"units left with a line", 8, 10, 100, Observed{Remaining: &two}, true},
		{"fewer OKs than units, nothing else known", 8, 10, 100, Observed{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := CheckSoldExactly(tc.ok, tc.stock, tc.users, tc.obs)
			if got := len(vs) > 0; got != tc.fails {
				t.Fatalf("violations %q, want failing %v", listed(vs), tc.fails)
			}
		})
	}
}
