package sale

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Arrival is one user's join of a waiting room as the tool saw it.
type Arrival struct {
	User int
	// Early is true when the join answered EARLY: the user joined before
	// the room opened.
	Early bool
	// Sent and Answered bound the moment the service put the user in
	// line.
	Sent, Answered time.Time
}

// Ticket is one admission: when it was issued (Redis's clock) and when
// its slot among the open tickets was freed at the latest the tool can
// tell: the send time of the grab that used it, else its expiry.
type Ticket struct {
	User     int
	At, Ends time.Time
}

// mostViolations is how many of one rule's breaches are listed; the rest
// are counted.
const mostViolations = 5

// violations collects one rule's breaches, listing the first few.
type violations struct {
	rule  string
	vs    []Violation
	extra int
}

func (v *violations) add(format string, args ...any) {
	if len(v.vs) == mostViolations {
		v.extra++
		return
	}
	v.vs = append(v.vs, Violation{v.rule, fmt.Sprintf(format, args...)})
}

func (v *violations) list() []Violation {
	if v.extra > 0 {
		v.vs = append(v.vs, Violation{v.rule, fmt.Sprintf("and %d more", v.extra)})
	}
	return v.vs
}

// CheckEarlyFirst checks that the early ones go first: once any later
// arrival was admitted, every early user was admitted, and none after
// it. admitted maps a user to their admission (Redis's milliseconds:
// one pacer run admits several users at the same instant, early ones
// first, so equal times pass).
func CheckEarlyFirst(arrivals []Arrival, admitted map[int]time.Time) []Violation {
	v := violations{rule: "early-first"}
	var firstLate time.Time
	firstLateUser := 0
	for _, a := range arrivals {
		if at, ok := admitted[a.User]; ok && !a.Early && (firstLate.IsZero() || at.Before(firstLate)) {
			firstLate, firstLateUser = at, a.User
		}
	}
	if firstLate.IsZero() {
		return nil // no later arrival admitted: nothing to compare
	}
	for _, a := range arrivals {
		if !a.Early {
			continue
		}
		at, ok := admitted[a.User]
		switch {
		case !ok:
			v.add("early user %d was never admitted, yet later arrival %d was (at %s)", a.User, firstLateUser, firstLate.Format(time.StampMilli))
		case at.After(firstLate):
			v.add("early user %d admitted at %s, %s after later arrival %d", a.User, at.Format(time.StampMilli), at.Sub(firstLate), firstLateUser)
		}
	}
	return v.list()
}

// CheckArrivalOrder checks first come, first served among the later
// arrivals: when a's join was answered before b's was sent, a stood in
// line before b, so if b was admitted then a was too, and no later. Joins
// that overlapped in time may be admitted in either order.
func CheckArrivalOrder(arrivals []Arrival, admitted map[int]time.Time) []Violation {
	v := violations{rule: "arrival-order"}
	var late []Arrival
	for _, a := range arrivals {
		if !a.Early {
			late = append(late, a)
		}
	}
	bySent := slices.Clone(late)
	sort.Slice(bySent, func(i, j int) bool { return bySent[i].Sent.Before(bySent[j].Sent) })
	byAnswered := late
	sort.Slice(byAnswered, func(i, j int) bool { return byAnswered[i].Answered.Before(byAnswered[j].Answered) })
	// Walking b by its send time, the users whose join was answered before
	// it grow as a prefix of byAnswered: keep their latest admission and
	// whether one of them was never admitted.
	next := 0
	var latest time.Time
	latestUser, missing := 0, 0
	for _, b := range bySent {
		for next < len(byAnswered) && byAnswered[next].Answered.Before(b.Sent) {
			a := byAnswered[next]
			if at, ok := admitted[a.User]; !ok {
				if missing == 0 {
					missing = a.User
				}
			} else if at.After(latest) {
				latest, latestUser = at, a.User
			}
			next++
		}
		at, ok := admitted[b.User]
		if !ok {
			continue
		}
		if missing != 0 {
			v.add("user %d admitted, but user %d, who joined before them, never was", b.User, missing)
		}
		if at.Before(latest) {
			v.add("user %d admitted at %s, %s before user %d, who joined before them", b.User, at.Format(time.StampMilli), latest.Sub(at), latestUser)
		}
	}
	return v.list()
}

// CheckPace checks the admissions against the room's pace: n admissions
// within Δ ms are at most rate + rate·Δ/1000 + 1 (a bucket of one
// second's worth, the millisecond's rounding). It compares every pair,
// so it suits the few thousand admissions of a sale.
func CheckPace(times []time.Time, rate int) []Violation {
	if rate <= 0 {
		return nil
	}
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	worst, worstN, worstMost := 0.0, 0, 0
	var worstSpan time.Duration
	for i := range ts {
		for j := i + 1; j < len(ts); j++ {
			span := ts[j].Sub(ts[i])
			n, most := j-i+1, rate+int(float64(rate)*float64(span.Milliseconds())/1000)+1
			if over := float64(n) / float64(most); n > most && over > worst {
				worst, worstN, worstMost, worstSpan = over, n, most, span
			}
		}
	}
	if worstN == 0 {
		return nil
	}
	return []Violation{{"pace", fmt.Sprintf("%d admitted within %s at %d a second, at most %d allowed", worstN, worstSpan, rate, worstMost)}}
}

// MostOpen returns the most tickets open at once, and when: each ticket
// counts from its admission until it ends, an end at the same instant as
// an admission freeing its slot first. Tickets ending at their grab's
// send time (the sale freed the slot later) make it a lower bound of
// what the service held.
func MostOpen(tickets []Ticket) (int, time.Time) {
	type event struct {
		at    time.Time
		delta int
	}
	evs := make([]event, 0, 2*len(tickets))
	for _, t := range tickets {
		if !t.Ends.After(t.At) {
			continue // used before it was issued: never open
		}
		evs = append(evs, event{t.At, 1}, event{t.Ends, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return evs[i].delta < evs[j].delta
	})
	open, most := 0, 0
	var when time.Time
	for _, e := range evs {
		open += e.delta
		if open > most {
			most, when = open, e.at
		}
	}
	return most, when
}

// CheckMostOpen checks the open tickets against the room's maxActive;
// MostOpen's count is a lower bound, so a count above it is a certain
// breach.
func CheckMostOpen(tickets []Ticket, maxActive int) (int, []Violation) {
	most, when := MostOpen(tickets)
	if maxActive > 0 && most > maxActive {
		return most, []Violation{{"max-active", fmt.Sprintf("%d tickets open at %s (at least), maxActive %d", most, when.Format(time.StampMilli), maxActive)}}
	}
	return most, nil
}

// CheckAdmittedBuyers checks that every OK went to an admitted user.
func CheckAdmittedBuyers(outs []Outcome, admitted map[int]time.Time) []Violation {
	v := violations{rule: "grab-without-admission"}
	for _, o := range outs {
		if _, ok := admitted[o.User]; o.Code == "OK" && !ok {
			v.add("user %d got OK (order %s) without an admission", o.User, o.OrderID)
		}
	}
	return v.list()
}

// Watcher is one subscriber's view of the end of a sale.
type Watcher struct {
	User int
	// Since is when its subscription brought its first place.
	Since time.Time
	// SoldOutAt is when its SOLD_OUT arrived; zero when none did.
	SoldOutAt time.Time
}

// Notices are the waiting subscribers' SOLD_OUT notices.
type Notices struct {
	Latency Latencies `json:"latency"`
	// Timed subscribers were following a place in line when the last
	// unit sold; After ones subscribed later (their first place said
	// SOLD_OUT at once) and are not timed.
	Timed int `json:"timed"`
	After int `json:"after"`
}

// SoldOutNotices measures, for each watcher never admitted and
// subscribed when the last unit sold (still waiting then), the time from
// lastUnit to its SOLD_OUT, and flags any above bound or missing.
func SoldOutNotices(watchers []Watcher, admitted map[int]time.Time, lastUnit time.Time, bound time.Duration) (Notices, []Violation) {
	v := violations{rule: "sold-out-notice"}
	var n Notices
	var ds []time.Duration
	for _, w := range watchers {
		if _, ok := admitted[w.User]; ok {
			continue
		}
		if w.Since.After(lastUnit) {
			n.After++
			continue
		}
		if w.SoldOutAt.IsZero() {
			v.add("user %d, waiting when the last unit sold, never heard SOLD_OUT", w.User)
			continue
		}
		d := w.SoldOutAt.Sub(lastUnit)
		ds = append(ds, d)
		if d > bound {
			v.add("user %d heard SOLD_OUT %s after the last unit (at most %s)", w.User, d.Round(time.Millisecond), bound)
		}
	}
	n.Latency, n.Timed = Summarize(ds), len(ds)
	return n, v.list()
}

// CheckSoldExactly checks that a line longer than the stock bought all
// of it: the stock query says nothing is left, and as many OKs as units
// (when every grab's answer settled it).
func CheckSoldExactly(ok, stock, users int, obs Observed) []Violation {
	if users <= stock {
		return nil
	}
	if r := obs.Remaining; r != nil && *r > 0 {
		return []Violation{{"sold-exactly", fmt.Sprintf("%d of %d units left unsold with %d users in line", *r, stock, users)}}
	}
	if ok < stock && obs.Rows == nil {
		return []Violation{{"sold-exactly", fmt.Sprintf("%d OK answers for %d units with %d users in line", ok, stock, users)}}
	}
	return nil
}
