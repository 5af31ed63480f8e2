package chaos

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The replay promise: a round's plan is a function of (seed, round).
func TestPlanDependsOnSeedAndRoundOnly(t *testing.T) {
	for _, short := range []bool{false, true} {
		a := newPlan(42, 7, kinds, short)
		newPlan(42, 6, kinds, short) // another round drawn in between changes nothing
		b := newPlan(42, 7, kinds, short)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("short=%v: round 7 of seed 42 drew two plans:\n%s\n%s", short, a, b)
		}
		if c := newPlan(43, 7, kinds, short); reflect.DeepEqual(a, c) {
			t.Fatalf("short=%v: seeds 42 and 43 drew the same round 7", short)
		}
		if a.kind != kinds[7%len(kinds)].name {
			t.Fatalf("round 7 runs %s, want %s", a.kind, kinds[7%len(kinds)].name)
		}
		if a.users*a.limit <= a.stock || len(a.attempts) <= a.stock {
			t.Fatalf("round cannot sell out: %s", a)
		}
		if newPlan(42, 8, kinds, short).tickets == a.tickets {
			t.Fatalf("short=%v: rounds 7 and 8 both sell with tickets=%v: a run of two rounds must sell both ways", short, a.tickets)
		}
	}
}

// judge is the suite's eyes: each check must fire on the outcome it
// names and stay quiet on a clean sale.
func TestJudgeSeesEachBrokenPromise(t *testing.T) {
	const stock, limit = 2, 1
	durable := plan{stock: stock, limit: limit, voucher: 9}
	wiped := durable
	bigger := durable
	bigger.stock = 3
	// Redis wiped while a node died: the orders only that node kept may be
	// lost. A wipe every node lives through loses none (ordersKept).
	wiped.faults = []fault{{what: faultRedisWipe}, {what: faultNodeKill}}
	wipedNodesLive := durable
	wipedNodesLive.faults = []fault{{what: faultRedisWipe}}
	ok := func(user int64, key, id string) answer {
		return answer{attempt: attempt{user: user, key: key}, grabAnswer: grabAnswer{Code: codeOK, OrderID: id}, phase: "sale"}
	}
	code := func(user int64, key, c string) answer {
		return answer{attempt: attempt{user: user, key: key}, grabAnswer: grabAnswer{Code: c}, phase: "sale"}
	}
	row := func(id, user int64) orderRow { return orderRow{id: id, user: user, voucher: 9, status: 1} }
	// clean: two users bought the two units; the tables and Redis agree.
	clean := func() state {
		st := state{drained: true, initial: stock, dbStock: 0, dbLimit: limit, api: liveStock{Initial: stock}}
		st.rows = []orderRow{row(1, 10), row(2, 11)}
		st.byID = map[int64]orderRow{1: row(1, 10), 2: row(2, 11)}
		zero := 0
		st.redisStock = &zero
		st.redisUsers = map[int64]int{10: 1, 11: 1}
		return st
	}
	// soldClean: clean, with the time Redis sold order 1.
	soldAt := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	soldClean := func() state {
		st := clean()
		first := st.byID[1]
		first.created = soldAt
		st.byID[1], st.rows[0] = first, first
		return st
	}
	sentAt := func(a answer, at time.Time) answer { a.sent = at; return a }
	// onlyFirst: user 10's order alone is in the stores, consistently.
	onlyFirst := func() state {
		st := clean()
		st.rows, st.byID = st.rows[:1], map[int64]orderRow{1: row(1, 10)}
		st.dbStock, st.redisUsers = 1, map[int64]int{10: 1}
		one := 1
		st.redisStock = &one
		return st
	}
	sold := []answer{ok(10, "a", "1"), ok(11, "b", "2"), code(12, "c", codeSoldOut)}
	// strandedUnit: stock 3, two units sold, and Redis took the third
	// for user 12's order, which the database refused.
	strandedUnit := func() state {
		st := clean()
		st.initial, st.api.Initial, st.dbStock = 3, 3, 1
		st.redisStamp = "load-1"
		st.redisUsers[12] = 1
		st.dead = []deadLetter{{order: 3, user: 12, reason: "over_stock", stamp: "load-1"}}
		return st
	}
	biggerFallback := bigger
	biggerFallback.fallback = true
	biggerWiped := bigger
	biggerWiped.faults = []fault{{what: faultRedisWipe}}
	cases := []struct {
		name    string
		p       plan
		answers []answer
		state   func() state
		want    []string // checks that must fire; none for a clean sale
	}{
		{"clean sale", durable, sold, clean, nil},
		{"a third OK answer", durable, append(slices.Clone(sold), ok(12, "c2", "3")), func() state {
			st := clean()
			st.redisStamp = "load-1"
			st.dead = []deadLetter{{order: 3, user: 12, reason: "over_stock", stamp: "load-1"}}
			return st
		}, []string{"oversell", "refused", "redis-identity", "dead-letter"}},
		{"a user over the limit", bigger, append(slices.Clone(sold[:2]), ok(10, "a2", "3")), func() state {
			st := clean()
			st.rows = append(st.rows, row(3, 10))
			st.byID[3] = row(3, 10)
			st.initial, st.api.Initial = 3, 3
			st.redisUsers[10] = 2
			return st
		}, []string{"user-limit"}},
		{"an OK'd order missing from a durable round", durable, sold, onlyFirst, []string{"lost"}},
		{"an OK'd order dead-lettered as sold from a lost load where Redis was wiped", wiped, sold, func() state {
			st := onlyFirst()
			st.dead = []deadLetter{{order: 2, user: 11, reason: lostLoad, stamp: "load-0"}}
			return st
		}, nil},
		{"the same dead letter in a durable round", durable, sold, func() state {
			st := onlyFirst()
			st.dead = []deadLetter{{order: 2, user: 11, reason: lostLoad, stamp: "load-0"}}
			return st
		}, []string{"refused", "dead-letter"}},
		{"the same order missing where Redis was wiped", wiped, sold, onlyFirst, nil},
		{"the same order missing where Redis was wiped and every node lived on", wipedNodesLive, sold, onlyFirst, []string{"lost"}},
		{"a row nobody was told about", durable, []answer{ok(10, "a", "1"), code(11, "b", codeSoldOut)}, clean, []string{"phantom"}},
		{"a row whose grab lost its reply", durable, []answer{ok(10, "a", "1"), code(11, "b", codeUnavailable)}, clean, nil},
		{"one order id for two users", durable, []answer{ok(10, "a", "1"), ok(11, "b", "1")}, onlyFirst, []string{"dup-id"}},
		{"a sold request answered SOLD_OUT on retry", durable, append(slices.Clone(sold), code(10, "a", codeSoldOut)), clean, []string{"retry"}},
		{"a SOLD_OUT sent after the sale to the key that sold", durable, append(slices.Clone(sold), sentAt(code(10, "a", codeSoldOut), soldAt.Add(time.Second))), soldClean, []string{"retry"}},
		{"a SOLD_OUT to the same key sent before it sold (a former attempt)", durable, append(slices.Clone(sold), sentAt(code(10, "a", codeSoldOut), soldAt.Add(-time.Second))), soldClean, nil},
		{"an undocumented error", durable, append(slices.Clone(sold), answer{attempt: attempt{user: 12}, grabAnswer: grabAnswer{Err: &gqlErrors{list: []gqlError{{Message: "x", Extensions: map[string]any{"code": "WEIRD"}}}}}}), clean, []string{"error"}},
		{"a grab refused at the gate (its ticket was not accepted)", durable, append(slices.Clone(sold), answer{attempt: attempt{user: 12}, grabAnswer: grabAnswer{Err: &gqlErrors{list: []gqlError{{Message: "x", Extensions: map[string]any{"code": "FORBIDDEN"}}}}}}), clean, []string{"ticket"}},
		{"a grab with no ticket to be had in a round without faults", durable, append(slices.Clone(sold), answer{attempt: attempt{user: 12}, grabAnswer: grabAnswer{Err: fmt.Errorf("%w: %w: x", errNotSent, errNoTicket)}}), clean, []string{"ticket"}},
		{"the same where Redis was wiped", wiped, append(slices.Clone(sold), answer{attempt: attempt{user: 12}, grabAnswer: grabAnswer{Err: fmt.Errorf("%w: %w: x", errNotSent, errNoTicket)}}), clean, nil},
		{"the same while a node's breaker opened (a machine too loaded for the deadlines)", durable, append(slices.Clone(sold), answer{attempt: attempt{user: 12}, grabAnswer: grabAnswer{Err: fmt.Errorf("%w: %w: x", errNotSent, errNoTicket)}}), func() state { st := clean(); st.breakerTrips = 1; return st }, nil},
		{"an undrained log", durable, sold, func() state { st := clean(); st.drained, st.logLeft = false, 3; return st }, []string{"not-drained"}},
		// One request, two orders: answered a refused order first, then
		// the stored one (the retry check, which follows the first OK,
		// is blind to it).
		{"one request id answered two orders", durable, []answer{ok(10, "a", "3"), ok(10, "a", "1"), ok(11, "b", "2")}, func() state {
			st := clean()
			st.redisStamp = "load-1" // a load after the order's: it took no unit of this one
			st.dead = []deadLetter{{order: 3, user: 10, reason: "over_user_limit", stamp: "load-0"}}
			return st
		}, []string{"oversell", "refused", "request-orders", "user-limit", "dead-letter"}},
		{"a request id sold again after Redis lost its order", wiped, []answer{ok(10, "a", "3"), ok(10, "a", "1"), ok(11, "b", "2")}, clean, nil},
		{"a request id answered an order refused after a wipe, then another", wiped, []answer{ok(10, "a", "3"), ok(10, "a", "1"), ok(11, "b", "2")}, func() state {
			st := clean()
			st.dead = []deadLetter{{order: 3, user: 10, reason: "over_user_limit", stamp: "load-0"}}
			return st
		}, []string{"oversell", "refused", "request-orders", "user-limit"}},
		// A unit stranded by an order nobody was told about, which the
		// database refused: the design's identity counts the dead letter;
		// where the fallback sold, nothing may be dead-lettered.
		{"a dead letter of this load beside a clean sale where Redis was wiped", biggerWiped, sold, strandedUnit, nil},
		{"the same where Redis lost nothing", bigger, sold, strandedUnit, []string{"dead-letter"}},
		{"the same in a fallback round", biggerFallback, sold, strandedUnit, []string{"redis-identity", "dead-letter"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := judge(tc.p, tc.answers, tc.state(), true)
			var got []string
			for _, v := range o.violations {
				if !slices.Contains(got, v.check) {
					got = append(got, v.check)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("checks fired %v, want %v; violations:\n%v", got, want, o.violations)
			}
		})
	}
}

// The degraded kinds' plans must build the shapes they are named for,
// whatever the seed.
func TestPlanBuildsTheDegradedShapes(t *testing.T) {
	byName := func(name string) []kind {
		ks, err := selectKinds([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	for seed := int64(1); seed <= 200; seed++ {
		short := seed%2 == 0
		t.Run("refund-wipe", func(t *testing.T) {
			p := newPlan(seed, 0, byName("refund-wipe"), short)
			if len(p.faults) != 2 || p.faults[0].what != faultPGOutage {
				t.Fatalf("seed %d: want a Postgres outage, then a wipe: %s", seed, p)
			}
			pg, wipe := p.faults[0], p.faults[1]
			switch {
			case wipe.what != faultRedisWipe && wipe.what != faultRedisFlush:
				t.Fatalf("seed %d: second fault is no wipe: %s", seed, p)
			case p.rpExpiry <= 0 || p.rpCount <= p.users:
				t.Fatalf("seed %d: the red packet must expire in the round with packets left: %s", seed, p)
			case pg.at >= p.rpExpiry:
				t.Fatalf("seed %d: Postgres must refuse before the expiry: %s", seed, p)
			case wipe.at < p.rpExpiry+refundGrace:
				t.Fatalf("seed %d: Redis must be wiped once the refund is due: %s", seed, p)
			case pg.at+pg.down <= wipe.at+wipe.down:
				t.Fatalf("seed %d: Postgres must come back after the wipe: %s", seed, p)
			case p.durable() || p.fallback:
				t.Fatalf("seed %d: a wiped round on the base profile: %s", seed, p)
			}
		})
		t.Run("redis-stall", func(t *testing.T) {
			p := newPlan(seed, 0, byName("redis-stall"), short)
			if !p.fallback || !slices.Equal(p.nodes, []int{0}) || len(p.faults) != 1 {
				t.Fatalf("seed %d: want one stall on the fallback profile's one node: %s", seed, p)
			}
			f := p.faults[0]
			switch {
			case f.what != faultRedisStall:
				t.Fatalf("seed %d: not a stall: %s", seed, p)
			case f.down < 1200*time.Millisecond:
				t.Fatalf("seed %d: too short for the breaker to open (three failed calls of 200 ms): %s", seed, p)
			case f.atOKs != 0:
				t.Fatalf("seed %d: the stall must come at its moment, around which the attempts are placed: %s", seed, p)
			case f.blip > 0 && (f.blipLead > f.down || f.blip <= f.blipLead):
				t.Fatalf("seed %d: Postgres must refuse around the resume: %s", seed, p)
			case !p.durable() || !p.retryOpen:
				t.Fatalf("seed %d: a durable round whose clients retry: %s", seed, p)
			}
			before, during := 0, 0
			for _, a := range p.attempts {
				if len(a.retryAfter) == 0 {
					t.Fatalf("seed %d: attempt %+v never retries", seed, a)
				}
				switch {
				case a.at < f.at:
					before++
				case a.at < f.at+f.down:
					during++
				}
			}
			// Part of the stock sells before the stall, and the fallback
			// has more buyers than units left.
			if before < 1 || before >= p.stock || during < p.stock-before {
				t.Fatalf("seed %d: %d attempts before the stall and %d during it, stock %d: %s", seed, before, during, p.stock, p)
			}
		})
	}
}

// The availability check: an UNAVAILABLE sent later than the bound after
// Redis served again is a violation; one sent before it, or any other
// answer, is not; the first OK after it is measured from then to its
// answer.
func TestJudgeAvailability(t *testing.T) {
	back := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ans := func(code string, after time.Duration) answer {
		a := answer{sent: back.Add(after), took: 100 * time.Millisecond}
		a.Code = code
		return a
	}
	for _, tc := range []struct {
		name    string
		answers []answer
		want    int
		firstOK time.Duration
	}{
		{"unavailable within the bound", []answer{ans(codeUnavailable, -time.Second), ans(codeUnavailable, 900*time.Millisecond), ans(codeOK, time.Second)}, 0, 1100 * time.Millisecond},
		{"sold after the bound", []answer{ans(codeOK, -time.Second), ans(codeOK, 30*time.Second)}, 0, 30*time.Second + 100*time.Millisecond},
		{"unavailable after the bound", []answer{ans(codeUnavailable, 1100*time.Millisecond), ans(codeOK, 2*time.Second)}, 1, 2100 * time.Millisecond},
		{"nothing sold after it", []answer{ans(codeSoldOut, 2*time.Second)}, 0, -1},
	} {
		var o outcome
		judgeAvailability(&o, tc.answers, back, time.Second)
		if len(o.violations) != tc.want || o.firstOK != tc.firstOK {
			t.Errorf("%s: violations %v, first OK %v; want %d, %v", tc.name, o.violations, o.firstOK, tc.want, tc.firstOK)
		}
	}
	var o outcome
	judgeAvailability(&o, []answer{ans(codeUnavailable, time.Hour)}, time.Time{}, time.Second)
	if len(o.violations) != 0 || o.measured {
		t.Errorf("no fault: violations %v, measured %v", o.violations, o.measured)
	}
}
