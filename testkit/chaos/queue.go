package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/persistence"
)

// The queue kind: a sale behind a waiting room (graph/queue.graphqls).
// Users join one after another, the first ones before the room opens,
// poll their place, and grab with their admission's ticket once admitted
// and the sale has begun; a few grab without a ticket or with another
// user's. Every place each client sees is recorded, and Redis's
// admissions are read at the end, so that the checks (judgeQueue) can
// tell a place lost, an admission given twice, the line not followed, or
// a sale to someone the room never admitted.

const (
	// roomReleaseBefore is the nodes' TICKET_RELEASE_BEFORE: a room opens
	// this long before its sale begins.
	roomReleaseBefore = 2 * time.Second
	// admissionTTL is the nodes' TICKET_TTL: an admission's ticket
	// expires this long after it (so admitted at = expiry - admissionTTL),
	// well after a round.
	admissionTTL = 2 * time.Minute
	// roomLead is how long after the second of the voucher's creation its
	// room opens (so 1-2 s after it): time for the early joins.
	roomLead = 2 * time.Second
	// roomTimeSlack is the slack allowed between the clocks of two
	// readings of the machine's time (Redis TIME in ms, Postgres).
	roomTimeSlack = 5 * time.Millisecond
)

// roomPlan is the waiting room of a queue round.
type roomPlan struct {
	rate, maxActive int
	// early is how many of the users join first, before the opening (as
	// long as the stores let them); the others join after it, one every
	// joinGap.
	early   int
	joinGap time.Duration
	// outsiders never join and grab anyway, without a ticket and with
	// one of another user's; stealers are users of the line who do the
	// same besides their own grab.
	outsiders, stealers int
}

func (r roomPlan) String() string {
	return fmt.Sprintf("waiting room admitting %d/s with %d open at most, %d joining early, the others every %dms, %d outsiders and %d users of the line grabbing without their admission",
		r.rate, r.maxActive, r.early, r.joinGap.Milliseconds(), r.outsiders, r.stealers)
}

// queueFaults plans a queue round: a small stock (one per user), more
// users than units, the room's pace, and the two faults (a node killed
// and started again, the Sentinel primary killed) at random moments
// until the line should be through.
func queueFaults(r *rand.Rand, p *plan, short bool) ([]int, []fault) {
	p.limit = 1
	if short {
		p.stock = 5 + r.IntN(8)
	} else {
		p.stock = 10 + r.IntN(31)
	}
	p.users = p.stock + 3 + r.IntN(p.stock/2+3)
	p.rpCount = p.stock
	// The room's admission is the only ticket its voucher takes.
	p.tickets, p.pow = false, false
	room := &roomPlan{
		rate:      20 + r.IntN(31),
		maxActive: 2 + r.IntN(6), // binds while the admitted wait for the sale to begin
		early:     1 + r.IntN(max(1, p.users/3)),
		joinGap:   between(r, 10*time.Millisecond, 40*time.Millisecond),
		outsiders: 1 + r.IntN(2),
		stealers:  1 + r.IntN(2),
	}
	p.room = room
	span := roomLead + roomReleaseBefore + time.Duration(p.stock)*time.Second/time.Duration(room.rate)
	p.window = span
	kill := fault{what: faultNodeKill, node: r.IntN(nodeCount), at: between(r, 200*time.Millisecond, span), down: between(r, 0, 1500*time.Millisecond)}
	failover := fault{what: faultPrimaryKill, at: between(r, 200*time.Millisecond, span), down: between(r, 500*time.Millisecond, 2*time.Second)}
	return allNodes(), []fault{kill, failover}
}

// roomPlace is a QueuePlace as a client reads it.
type roomPlace struct {
	State     string     `json:"state"`
	Position  *int       `json:"position"`
	Ticket    *string    `json:"ticket"`
	ExpiresAt *time.Time `json:"expiresAt"`
}

// Queue states (QueueState).
const (
	stateEarly    = "EARLY"
	stateWaiting  = "WAITING"
	stateAdmitted = "ADMITTED"
	stateSoldOut  = "SOLD_OUT"
	stateClosed   = "CLOSED"
)

// joinQueue joins the voucher's waiting room as the token's user.
func (a *api) joinQueue(ctx context.Context, base, token, voucherID string) (*roomPlace, error) {
	const q = `mutation($v: ID!) { joinQueue(voucherId: $v) { state position ticket expiresAt } }`
	var out struct {
		JoinQueue *roomPlace `json:"joinQueue"`
	}
	if err := a.do(ctx, base, token, q, map[string]any{"v": voucherID}, &out); err != nil {
		return nil, fmt.Errorf("join the waiting room of voucher %s: %w", voucherID, err)
	}
	if out.JoinQueue == nil {
		return nil, fmt.Errorf("join the waiting room of voucher %s: %w", voucherID, &badResponse{status: 200, body: "joinQueue null"})
	}
	return out.JoinQueue, nil
}

// queuePlace reads the token's user's place; nil when they have none.
func (a *api) queuePlace(ctx context.Context, base, token, voucherID string) (*roomPlace, error) {
	const q = `query($v: ID!) { queuePlace(voucherId: $v) { state position ticket expiresAt } }`
	var out struct {
		QueuePlace *roomPlace `json:"queuePlace"`
	}
	if err := a.do(ctx, base, token, q, map[string]any{"v": voucherID}, &out); err != nil {
		return nil, fmt.Errorf("place in the waiting room of voucher %s: %w", voucherID, err)
	}
	return out.QueuePlace, nil
}

// placeSeen is one place a client was answered; place nil: no place.
type placeSeen struct {
	at    time.Time
	how   string // "join" or "place"
	place *roomPlace
}

// roomUser is one user of a queue round as their client saw it.
type roomUser struct {
	id int64
	// arrival is the user's rank in the order of joins: each join is sent
	// only once the one before was answered.
	arrival int
	// joined: a join was answered with a place. unsure: some attempt of
	// the join failed in a way that may have written the place (an
	// UNAVAILABLE, a lost reply), so when it was written, and whether
	// before the opening, is not known. early: the join's answer said
	// EARLY.
	joined, unsure, early bool
	seen                  []placeSeen
	// admitted is the first ADMITTED place seen: its ticket and expiry.
	admitted *roomPlace
	done     bool // grabbed to a decision, or saw the stock gone
}

// roomRun is what a queue round's clients saw.
type roomRun struct {
	open, begin time.Time
	users       []*roomUser
	// bad are the grabs without the grabber's own admission: never OK.
	bad []badGrab
	// errs counts the join and place calls that failed, by label.
	errs map[string]int
}

// badGrab is a grab sent without the user's own admission ticket.
type badGrab struct {
	user int64
	how  string // "no ticket" or "user N's ticket"
	grabAnswer
}

// sellQueue runs a queue round's sale: the faults at their moments, the
// users joining in their order, each polling their place and grabbing
// with their admission's ticket once admitted and the sale has begun, and
// the bad grabs. It returns the voucher's grab answers (the bad grabs
// apart, in the roomRun) and what went wrong injecting faults.
func (rn *runner) sellQueue(ctx context.Context, p plan, voucherID string, begin time.Time) ([]answer, *roomRun, []error) {
	start := time.Now()
	rp := p.room
	run := &roomRun{open: begin.Add(-roomReleaseBefore), begin: begin, errs: map[string]int{}}
	base := userBase(p.round)
	for i := range p.users {
		run.users = append(run.users, &roomUser{id: base + int64(i), arrival: i})
	}
	r := rand.New(rand.NewPCG(uint64(rn.seed), uint64(p.round)<<1))
	var (
		mu      sync.Mutex
		answers []answer
		errs    []error
		wg      sync.WaitGroup
		oks     atomic.Int64
	)
	rn.injectFaults(ctx, p, start, &oks, &wg, func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	// The sale ends once every user who joined grabbed to a decision or
	// saw the stock gone, and the joins are over; at the latest when the
	// line should long be through.
	deadline := begin.Add(12 * time.Second)
	sctx, stop := context.WithDeadline(ctx, deadline)
	defer stop()
	var pending atomic.Int64
	pending.Store(int64(p.users) + 1) // the joins are one more
	settled := func() {
		if pending.Add(-1) == 0 {
			stop()
		}
	}
	failed := func(label string) {
		mu.Lock()
		run.errs[label]++
		mu.Unlock()
	}
	see := func(u *roomUser, how string, pl *roomPlace) {
		mu.Lock()
		u.seen = append(u.seen, placeSeen{at: time.Now(), how: how, place: pl})
		if pl != nil && pl.State == stateAdmitted && u.admitted == nil && pl.Ticket != nil && pl.ExpiresAt != nil {
			u.admitted = pl
		}
		mu.Unlock()
	}
	// nodeFor is the node a user's next call goes to: their own, and the
	// other one after a refused connection.
	nodeFor := func(u *roomUser, try int) int { return p.nodes[(int(u.id)+try)%len(p.nodes)] }

	grab := func(u *roomUser, ticket string) {
		token, _ := rn.env.userToken(u.id)
		a := attempt{user: u.id, key: fmt.Sprintf("chaos-%d-%d-0", p.round, u.id-base)}
		key := ""
		if rn.requestIDs {
			key = a.key
		}
		// Asked again until decided: an admission left unused holds its
		// open ticket, and the line behind it waits.
		for try := 0; sctx.Err() == nil; try++ {
			a.node, a.at = nodeFor(u, try), time.Since(start)
			ans := answer{attempt: a, phase: "sale", keySent: rn.requestIDs, sent: time.Now()}
			ans.grabAnswer = rn.api.grab(ctx, rn.env.nodes[a.node].Base, token, voucherID, key, ticket)
			ans.took = time.Since(ans.sent)
			if errors.Is(ans.Err, errNotSent) {
				continue // never arrived: the other node
			}
			if ans.Code == codeOK {
				oks.Add(1)
			}
			mu.Lock()
			answers = append(answers, ans)
			mu.Unlock()
			if ans.decided() {
				return
			}
			sleep(sctx, 200*time.Millisecond)
		}
	}
	// follow polls a user's place until the sale ends, grabbing once
	// admitted.
	follow := func(u *roomUser) {
		token, _ := rn.env.userToken(u.id)
		every := between(pollRand(u.id), 200*time.Millisecond, 300*time.Millisecond)
		for try := 0; sctx.Err() == nil; {
			pl, err := rn.api.queuePlace(sctx, rn.env.nodes[nodeFor(u, try)].Base, token, voucherID)
			switch {
			case sctx.Err() != nil:
				return
			case errors.Is(err, errNotSent):
				try++
				continue
			case err != nil:
				failed("place:" + (answer{grabAnswer: grabAnswer{Err: err}}).label())
				sleep(sctx, 100*time.Millisecond)
				continue
			}
			see(u, "place", pl)
			if pl != nil && !u.done {
				switch pl.State {
				case stateAdmitted:
					if pl.Ticket != nil && pl.ExpiresAt != nil {
						rn.tickets.put(u.id, *pl.Ticket, *pl.ExpiresAt)
						sleepUntil(ctx, begin.Add(20*time.Millisecond)) // a grab before the sale begins is NOT_STARTED
						grab(u, *pl.Ticket)
						u.done = true
						settled()
					}
				case stateSoldOut, stateClosed:
					u.done = true
					settled()
				}
			}
			if u.done {
				sleep(sctx, 2*every) // watched on, less often: an admission must not change
			} else {
				sleep(sctx, every)
			}
		}
	}
	// The joins, one after another in the users' order: the first ones
	// right away (before the opening, when the stores let them), the
	// others from the opening on, one every joinGap.
	wg.Go(func() {
		defer settled()
		for i, u := range run.users {
			if i >= rp.early {
				if !sleepUntil(sctx, later(time.Now().Add(rp.joinGap), run.open.Add(50*time.Millisecond))) {
					return
				}
			}
			if !rn.joinUser(sctx, u, voucherID, nodeFor, see, failed) {
				settled() // never joined: nothing to wait for
				continue
			}
			wg.Go(func() { follow(u) })
		}
	})
	// The bad grabs, soon after the sale begins: outsiders and users of
	// the line without a ticket, then with the first admission's ticket
	// of someone else that a client saw.
	wg.Go(func() {
		var grabbers []int64
		for i := range rp.outsiders {
			grabbers = append(grabbers, base+probeUsers-100+int64(i))
		}
		for range rp.stealers {
			grabbers = append(grabbers, base+int64(r.IntN(p.users)))
		}
		if !sleepUntil(sctx, begin.Add(between(r, 50*time.Millisecond, 600*time.Millisecond))) {
			return
		}
		for i, g := range grabbers {
			token, _ := rn.env.userToken(g)
			send := func(how, ticket string) {
				for try := range 2 {
					ans := rn.api.grab(sctx, rn.env.nodes[p.nodes[(i+try)%len(p.nodes)]].Base, token, voucherID, fmt.Sprintf("chaos-%d-bad-%d-%d", p.round, g-base, len(run.bad)), ticket)
					if errors.Is(ans.Err, errNotSent) {
						continue
					}
					mu.Lock()
					run.bad = append(run.bad, badGrab{user: g, how: how, grabAnswer: ans})
					mu.Unlock()
					return
				}
			}
			send("no ticket", "")
			// Someone else's admission, once there is one.
			for sctx.Err() == nil {
				mu.Lock()
				var victim *roomUser
				for _, u := range run.users {
					if u.id != g && u.admitted != nil {
						victim = u
						break
					}
				}
				mu.Unlock()
				if victim != nil {
					send(fmt.Sprintf("user %d's ticket", victim.id), *victim.admitted.Ticket)
					break
				}
				sleep(sctx, 100*time.Millisecond)
			}
		}
	})
	wg.Wait()
	return answers, run, errs
}

// pollRand is a user's own random source for their polling's jitter.
func pollRand(user int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(user), 7)) }

// joinUser joins u to the voucher's room, retrying what fails: at once
// on the other node after a refused connection, after 100 ms otherwise
// (marking u unsure: the failed call may have written the place). It
// reports whether a join was answered with a place.
func (rn *runner) joinUser(ctx context.Context, u *roomUser, voucherID string, nodeFor func(*roomUser, int) int, see func(*roomUser, string, *roomPlace), failed func(string)) bool {
	token, err := rn.env.userToken(u.id)
	if err != nil {
		failed("join:token")
		return false
	}
	for try := 0; ctx.Err() == nil; {
		pl, err := rn.api.joinQueue(ctx, rn.env.nodes[nodeFor(u, try)].Base, token, voucherID)
		switch {
		case errors.Is(err, errNotSent):
			try++
			continue
		case err != nil:
			if ctx.Err() != nil {
				return false
			}
			u.unsure = true
			failed("join:" + (answer{grabAnswer: grabAnswer{Err: err}}).label())
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		u.joined, u.early = true, pl.State == stateEarly
		see(u, "join", pl)
		return true
	}
	return false
}

// put records a user's ticket, as a client keeps its admission's.
func (b *ticketBook) put(user int64, ticket string, expires time.Time) {
	b.mu.Lock()
	b.byUser[user] = bookedTicket{ticket: ticket, expires: expires}
	b.mu.Unlock()
}

// roomState is what Redis holds of a room once the round drained.
type roomState struct {
	// admissions: user -> their admission's ticket expiry ({v}:qx).
	admissions map[int64]time.Time
	// resets: how often the room was emptied ({v}:qm's resets).
	resets int
}

// readRoom reads the room's admissions and resets from Redis.
func (rn *runner) readRoom(ctx context.Context, voucher int64) (roomState, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st := roomState{admissions: map[int64]time.Time{}}
	var raw map[string]string
	var err error
	for try := 0; try < 10; try++ { // the failover's clients may still be finding the primary
		if raw, err = rn.env.store.HGetAll(ctx, persistence.AdmissionsKey(voucher)).Result(); err == nil {
			break
		}
		sleep(ctx, 300*time.Millisecond)
	}
	if err != nil {
		return st, fmt.Errorf("read the admissions of voucher %d: %w", voucher, err)
	}
	for u, ms := range raw {
		uid, err1 := strconv.ParseInt(u, 10, 64)
		n, err2 := strconv.ParseInt(ms, 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return st, fmt.Errorf("admission %q=%q: %w", u, ms, err)
		}
		st.admissions[uid] = time.UnixMilli(n)
	}
	resets, err := rn.env.store.HGet(ctx, fmt.Sprintf("{v%d}:qm", voucher), "resets").Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("read the resets of voucher %d's room: %w", voucher, err)
	}
	st.resets = resets
	return st, nil
}

// roomFigures are a queue round's numbers for its line.
type roomFigures struct {
	joined, early, unsure, admitted, resets, bad, errors int
	// failed: the join and place calls that failed, by label, for -v.
	failed map[string]int
}

// judgeQueue checks the waiting room's promises of a queue round (a
// lossless one: REDIS_ACK_REPLICAS, a failover loses nothing):
//
//   - queue-reset: the room was never emptied (a reset drops every place
//     and admission: on this kind it is a loss);
//   - queue-lost: no user whose join was answered is ever told they have
//     no place;
//   - queue-double: an admission never changes once a client saw it (a
//     second admission has another expiry) and Redis ends with the one
//     the client saw; a user once ADMITTED is never again EARLY, WAITING,
//     SOLD_OUT or CLOSED (their ticket is good for minutes);
//   - queue-admitted: every user answered OK, and every user with a live
//     order, was admitted (Redis's admissions) and saw it, and no order
//     was sold before its buyer's admission;
//   - queue-order: every early user was admitted no later than any late
//     one, the late ones in the order they joined (admitted at = expiry -
//     TICKET_TTL; ties are one admission run), and nobody was passed over
//     (admitted while one ahead of them never was);
//   - queue-gate: no grab without the grabber's own admission ticket was
//     answered OK.
//
// A user whose join failed in a way that may have written the place
// (unsure) has no known arrival: the order leaves them out.
func judgeQueue(o *outcome, p plan, run *roomRun, rs roomState, answers []answer, st state) {
	f := &roomFigures{resets: rs.resets, admitted: len(rs.admissions), failed: run.errs}
	o.room = f
	for _, n := range run.errs {
		f.errors += n
	}
	if rs.resets > 0 {
		o.add("queue-reset", "the waiting room was emptied %d times (places and admissions dropped) in a round where Redis loses nothing", rs.resets)
	}
	admittedAt := func(u int64) (time.Time, bool) {
		exp, ok := rs.admissions[u]
		return exp.Add(-admissionTTL), ok
	}
	byID := map[int64]*roomUser{}
	for _, u := range run.users {
		byID[u.id] = u
		if !u.joined {
			continue
		}
		f.joined++
		if u.early {
			f.early++
		}
		if u.unsure {
			f.unsure++
		}
		var first *roomPlace // the first admission seen
		lost := false
		for _, s := range u.seen {
			switch {
			case s.place == nil:
				if !lost {
					o.add("queue-lost", "user %d, whose join was answered, was told at %s (%s) they have no place", u.id, clock(s.at), s.how)
				}
				lost = true
			case s.place.State == stateAdmitted:
				if s.place.ExpiresAt == nil || s.place.Ticket == nil {
					o.add("queue-double", "user %d ADMITTED without a ticket or its expiry", u.id)
					continue
				}
				if first == nil {
					first = s.place
				} else if !s.place.ExpiresAt.Equal(*first.ExpiresAt) {
					o.add("queue-double", "user %d admitted twice: a ticket until %s, then at %s one until %s", u.id, clock(*first.ExpiresAt), clock(s.at), clock(*s.place.ExpiresAt))
					first = s.place
				}
			case first != nil:
				o.add("queue-double", "user %d, ADMITTED until %s, was %s again at %s (%s)", u.id, clock(*first.ExpiresAt), s.place.State, clock(s.at), s.how)
			}
		}
		if first != nil {
			exp, ok := rs.admissions[u.id]
			switch {
			case !ok:
				o.add("queue-double", "user %d was seen ADMITTED until %s; Redis ends with no admission of theirs", u.id, clock(*first.ExpiresAt))
			case !exp.Equal(first.ExpiresAt.Truncate(time.Millisecond)):
				o.add("queue-double", "user %d was seen ADMITTED until %s; Redis ends with an admission until %s", u.id, clock(*first.ExpiresAt), clock(exp))
			}
		}
	}

	// No grab without an admission.
	buyers := map[int64]bool{}
	for _, a := range answers {
		if a.Code == codeOK {
			buyers[a.user] = true
		}
	}
	for _, row := range st.rows {
		if !row.live() {
			continue
		}
		buyers[row.user] = true
		if at, ok := admittedAt(row.user); ok && row.created.Before(at.Add(-roomTimeSlack)) {
			o.add("queue-admitted", "order %d of user %d was sold at %s, before their admission at %s", row.id, row.user, clock(row.created), clock(at))
		}
	}
	for _, b := range slices.Sorted(maps.Keys(buyers)) {
		_, inRedis := rs.admissions[b]
		u := byID[b]
		switch {
		case !inRedis:
			o.add("queue-admitted", "user %d bought (an OK answer or a live order) but the room never admitted them", b)
		case u == nil || u.admitted == nil:
			o.add("queue-admitted", "user %d bought, and no client of theirs was ever told they were ADMITTED", b)
		}
	}
	for _, g := range run.bad {
		f.bad++
		if g.Code == codeOK {
			o.add("queue-gate", "user %d's grab with %s was answered OK (order %s)", g.user, g.how, g.OrderID)
		}
	}

	// The line's order, among the users whose arrival is known.
	var early, late []*roomUser
	for _, u := range run.users {
		if !u.joined || u.unsure {
			continue
		}
		if u.early {
			early = append(early, u)
		} else {
			late = append(late, u)
		}
	}
	// Every early user stands before every late one.
	var lastEarly, firstLate time.Time
	var lastEarlyUser, firstLateUser, missingEarly int64
	for _, u := range early {
		if at, ok := admittedAt(u.id); !ok {
			missingEarly = u.id
		} else if at.After(lastEarly) {
			lastEarly, lastEarlyUser = at, u.id
		}
	}
	for _, u := range late {
		if at, ok := admittedAt(u.id); ok && (firstLate.IsZero() || at.Before(firstLate)) {
			firstLate, firstLateUser = at, u.id
		}
	}
	switch {
	case firstLate.IsZero():
	case missingEarly != 0:
		o.add("queue-order", "late user %d was admitted at %s; early user %d never was", firstLateUser, clock(firstLate), missingEarly)
	case firstLate.Before(lastEarly):
		o.add("queue-order", "late user %d was admitted at %s, before early user %d at %s", firstLateUser, clock(firstLate), lastEarlyUser, clock(lastEarly))
	}
	// The late ones in the order they joined, nobody passed over.
	var prev, skipped *roomUser // the last admitted so far; the first never admitted
	var prevAt time.Time
	reported := 0
	for _, u := range late {
		at, ok := admittedAt(u.id)
		if !ok {
			if skipped == nil {
				skipped = u
			}
			continue
		}
		switch {
		case reported >= 5:
		case skipped != nil:
			o.add("queue-order", "user %d (join %d) was admitted at %s; user %d, who joined before them (join %d), never was", u.id, u.arrival, clock(at), skipped.id, skipped.arrival)
			reported++
		case prev != nil && at.Before(prevAt):
			o.add("queue-order", "user %d (join %d) was admitted at %s, before user %d (join %d), who joined before them, at %s", u.id, u.arrival, clock(at), prev.id, prev.arrival, clock(prevAt))
			reported++
		}
		if prev == nil || !at.Before(prevAt) {
			prev, prevAt = u, at
		}
	}
}

// clock is a moment as the checks print it.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
