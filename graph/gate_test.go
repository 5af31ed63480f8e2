package graph_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
	"flashsale/usecase/gate"

	"github.com/redis/go-redis/v9"
)

const ticketGrabMutation = `mutation($id: ID!, $ticket: String) { seckillVoucher(voucherId: $id, ticket: $ticket) { code orderId message } }`

const ticketQuery = `query($id: ID!, $c: String, $n: String) { seckillTicket(voucherId: $id, challenge: $c, nonce: $n) { ticket expiresAt } }`

const challengeQuery = `query($id: ID!) { seckillChallenge(voucherId: $id) { challenge difficulty expiresAt } }`

// gatedInput is a seckill voucher whose grabs need a ticket.
func gatedInput(stock int, challenge string) map[string]any {
	in := seckillInput(1, stock)
	in["requireTicket"] = true
	in["challenge"] = challenge
	return in
}

// ticket asks seckillTicket for a user's ticket.
func (s *testServer) ticket(tb testing.TB, user int64, voucherID string) string {
	tb.Helper()
	var out struct{ SeckillTicket struct{ Ticket string } }
	s.mustDo(tb, s.token(tb, user, auth.RoleUser), ticketQuery, map[string]any{"id": voucherID}, &out)
	return out.SeckillTicket.Ticket
}

// grab sends one grab with an optional ticket from an optional client IP
// and returns its code, or the code of its one GraphQL error.
func (s *testServer) grab(tb testing.TB, user int64, voucherID, ticket, ip string) string {
	tb.Helper()
	vars := map[string]any{"id": voucherID}
	if ticket != "" {
		vars["ticket"] = ticket
	}
	body, _ := json.Marshal(map[string]any{"query": ticketGrabMutation, "variables": vars})
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.token(tb, user, auth.RoleUser))
	if ip != "" {
		req.RemoteAddr = ip + ":4242"
	}
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, req)
	var resp struct {
		Data struct {
			SeckillVoucher *struct{ Code string }
		}
		Errors []gqlError
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		tb.Fatalf("grab: %v: %s", err, rec.Body.String())
	}
	switch {
	case len(resp.Errors) == 1:
		return resp.Errors[0].code()
	case len(resp.Errors) > 1 || resp.Data.SeckillVoucher == nil:
		tb.Fatalf("grab: %s", rec.Body.String())
	}
	return resp.Data.SeckillVoucher.Code
}

func TestTicketedGrabRefusals(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, gatedInput(10, "NONE"))
	other := s.createVoucher(t, gatedInput(10, "NONE"))
	open := s.createVoucher(t, seckillInput(1, 10))
	vid, _ := strconv.ParseInt(v.ID, 10, 64)
	const user, someoneElse = 100, 101
	valid := s.ticket(t, user, v.ID)
	tampered := []byte(valid)
	tampered[len(tampered)-1] ^= 1
	cases := []struct {
		name, ticket string
	}{
		{name: "without a ticket", ticket: ""},
		{name: "with another user's ticket", ticket: s.ticket(t, someoneElse, v.ID)},
		{name: "with an expired ticket", ticket: s.gate.Tickets().Issue(user, vid, time.Now().Add(-time.Second))},
		{name: "with a ticket for another voucher", ticket: s.ticket(t, user, other.ID)},
		{name: "with a ticket signed with another key", ticket: gate.NewTickets(gate.KeyFrom("not-the-secret")).Issue(user, vid, time.Now().Add(time.Minute))},
		{name: "with a tampered ticket", ticket: string(tampered)},
		{name: "with garbage", ticket: "not-a-ticket"},
	}
	for _, tc := range cases {
		t.Run("refused "+tc.name, func(t *testing.T) {
			if code := s.grab(t, user, v.ID, tc.ticket, ""); code != "FORBIDDEN" {
				t.Fatalf("code %s, want FORBIDDEN", code)
			}
		})
	}
	var info struct {
		Voucher struct{ Seckill struct{ Remaining int } }
	}
	s.mustDo(t, s.admin(t), `query($id: ID!) { voucher(id: $id) { seckill { remaining } } }`, map[string]any{"id": v.ID}, &info)
	if info.Voucher.Seckill.Remaining != 10 {
		t.Fatalf("refused grabs took stock: remaining %d", info.Voucher.Seckill.Remaining)
	}
	if code := s.grab(t, user, v.ID, valid, ""); code != "OK" {
		t.Fatalf("grab with a valid ticket: %s", code)
	}
	if code := s.grab(t, user, open.ID, "", ""); code != "OK" {
		t.Fatalf("grab of an open voucher without a ticket: %s", code)
	}
	errs := s.do(t, s.token(t, user, auth.RoleUser), ticketGrabMutation, map[string]any{"id": v.ID}, nil)
	if e := wantCode(t, errs, "FORBIDDEN"); !strings.Contains(e.Message, "seckillTicket") {
		t.Fatalf("the refusal does not say what to do: %q", e.Message)
	}
}

// With valid tickets the sale is exact under 20,000 users; refused grabs
// (another user's ticket) are mixed in and take nothing.
// Not parallel, like TestConcurrentGrabsThroughGraphQL: it keeps every
// core busy.
func TestTicketedSaleIsExact(t *testing.T) {
	cases := []struct {
		name                    string
		stock, limit            int
		users, attempts, wantOK int
	}{
		{name: "20,000 users, two grabs each and a stolen ticket each tenth", stock: 1000, limit: 1, users: 20_000, attempts: 2, wantOK: 1000},
		{name: "one ticket serves up to the per-user limit", stock: 1000, limit: 3, users: 50, attempts: 5, wantOK: 150},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			in := gatedInput(tc.stock, "NONE")
			in["perUserLimit"] = tc.limit
			v := s.createVoucher(t, in)
			vid, _ := strconv.ParseInt(v.ID, 10, 64)
			exp := time.Now().Add(time.Hour)
			var jobs []grabOutcome
			for u := 1; u <= tc.users; u++ {
				ticket := s.gate.Tickets().Issue(int64(u), vid, exp) // as seckillTicket issues it, without 20,000 queries
				for a := 0; a < tc.attempts; a++ {
					jobs = append(jobs, grabOutcome{user: int64(u), voucher: v.ID, ticket: ticket})
				}
				if u%10 == 0 {
					jobs = append(jobs, grabOutcome{user: int64(u - 1), voucher: v.ID, ticket: ticket, code: "stolen"})
				}
			}
			for i := range jobs {
				if jobs[i].code == "stolen" {
					jobs[i].code, jobs[i].orderID = "", "stolen"
				}
			}
			out := s.grabAll(t, jobs, 128)
			var sold []grabOutcome
			for _, o := range out {
				if o.orderID == "stolen" {
					if o.code != "FORBIDDEN" {
						t.Fatalf("user %d's grab with another user's ticket: %s", o.user, o.code)
					}
					continue
				}
				sold = append(sold, o)
			}
			if ok := s.checkSale(t, v.ID, tc.stock, tc.limit, sold); ok != tc.wantOK {
				t.Fatalf("%d OK, want %d", ok, tc.wantOK)
			}
		})
	}
}

func TestTicketsReleasedBeforeTheSale(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	now := time.Now().UTC()
	at := func(begin, end time.Duration) map[string]any {
		in := gatedInput(5, "NONE")
		in["beginAt"], in["endAt"] = now.Add(begin).Format(time.RFC3339), now.Add(end).Format(time.RFC3339)
		return in
	}
	later := s.createVoucher(t, at(10*time.Minute, time.Hour))
	soon := s.createVoucher(t, at(30*time.Second, time.Hour)) // within the minute's release
	user := s.token(t, 100, auth.RoleUser)

	errs := s.do(t, user, ticketQuery, map[string]any{"id": later.ID}, nil)
	if e := wantCode(t, errs, "FORBIDDEN"); !strings.Contains(e.Message, "released at") {
		t.Fatalf("refusal before the release does not say when: %q", e.Message)
	}
	if s.ticket(t, 100, soon.ID) == "" {
		t.Fatal("no ticket within the release")
	}
	// Before the sale begins, a ticket does not open it.
	if code := s.grab(t, 100, soon.ID, s.ticket(t, 100, soon.ID), ""); code != "NOT_STARTED" {
		t.Fatalf("grab before the begin with a ticket: %s", code)
	}

	var out struct {
		ServerTime time.Time
		Voucher    struct {
			Seckill struct {
				StartsInMs, EndsInMs int
				RequireTicket        bool
				Challenge            string
			}
		}
	}
	before := time.Now()
	s.mustDo(t, user, `query($id: ID!) { serverTime voucher(id: $id) { seckill { startsInMs endsInMs requireTicket challenge } } }`, map[string]any{"id": later.ID}, &out)
	after := time.Now()
	if out.ServerTime.Before(before.Add(-time.Millisecond)) || out.ServerTime.After(after.Add(time.Millisecond)) {
		t.Fatalf("serverTime %s outside [%s, %s]", out.ServerTime, before, after)
	}
	begin, _ := time.Parse(time.RFC3339, now.Add(10*time.Minute).Format(time.RFC3339))
	want := begin.Sub(before).Milliseconds()
	if sk := out.Voucher.Seckill; sk.StartsInMs > int(want)+1 || sk.StartsInMs < int(want)-2000 || sk.EndsInMs <= sk.StartsInMs || !sk.RequireTicket || sk.Challenge != "NONE" {
		t.Fatalf("seckill %+v, startsInMs want about %d", sk, want)
	}
}

func TestChallengeBeforeTicket(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, gatedInput(5, "POW"))
	user := s.token(t, 100, auth.RoleUser)

	wantCode(t, s.do(t, user, ticketQuery, map[string]any{"id": v.ID}, nil), "BAD_USER_INPUT")
	challenge := func(user string) (string, int) {
		var out struct {
			SeckillChallenge struct {
				Challenge  string
				Difficulty int
			}
		}
		s.mustDo(t, user, challengeQuery, map[string]any{"id": v.ID}, &out)
		return out.SeckillChallenge.Challenge, out.SeckillChallenge.Difficulty
	}
	ch, d := challenge(user)
	if d != testGateOptions.Difficulty {
		t.Fatalf("difficulty %d", d)
	}
	nonce, err := gate.Solve(ch, -1)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a wrong nonce is refused without a Redis call", func(t *testing.T) {
		wrong := "nonce-that-fails"
		for gate.Solves(ch, wrong) {
			wrong += "!"
		}
		calls := s.gateCalls.Commands.Load()
		wantCode(t, s.do(t, user, ticketQuery, map[string]any{"id": v.ID, "c": ch, "n": wrong}, nil), "FORBIDDEN")
		if n := s.gateCalls.Commands.Load() - calls; n != 0 {
			t.Fatalf("a wrong nonce cost %d Redis commands", n)
		}
	})
	t.Run("another user cannot use it", func(t *testing.T) {
		wantCode(t, s.do(t, s.token(t, 101, auth.RoleUser), ticketQuery, map[string]any{"id": v.ID, "c": ch, "n": nonce}, nil), "FORBIDDEN")
	})
	var out struct{ SeckillTicket struct{ Ticket string } }
	s.mustDo(t, user, ticketQuery, map[string]any{"id": v.ID, "c": ch, "n": nonce}, &out)
	if code := s.grab(t, 100, v.ID, out.SeckillTicket.Ticket, ""); code != "OK" {
		t.Fatalf("grab with the ticket the challenge bought: %s", code)
	}
	t.Run("a solved challenge cannot be replayed", func(t *testing.T) {
		e := wantCode(t, s.do(t, user, ticketQuery, map[string]any{"id": v.ID, "c": ch, "n": nonce}, nil), "FORBIDDEN")
		if !strings.Contains(e.Message, "used already") {
			t.Fatalf("replay refused with %q", e.Message)
		}
		other := "" // a second solution of the same challenge
		for i := 0; other == ""; i++ {
			if c := "other-" + strconv.Itoa(i); gate.Solves(ch, c) {
				other = c
			}
		}
		wantCode(t, s.do(t, user, ticketQuery, map[string]any{"id": v.ID, "c": ch, "n": other}, nil), "FORBIDDEN")
	})
	t.Run("an open voucher asks no challenge", func(t *testing.T) {
		open := s.createVoucher(t, seckillInput(1, 5))
		wantCode(t, s.do(t, user, challengeQuery, map[string]any{"id": open.ID}, nil), "BAD_USER_INPUT")
	})
}

// Ticket verification adds no Redis call to a grab, so that the gate costs
// the sale's hot path nothing in Redis. Grabs one at a time (a batch of
// one each) of an open voucher and of a voucher that needs a ticket cost
// the router's client the same commands, and the gate's client none.
func TestTicketCheckAddsNoRedisCall(t *testing.T) {
	t.Parallel()
	var grabCalls testenv.Counter
	opts := testGateOptions
	opts.Refresh = time.Hour // no periodic re-read inside the measurement
	s := startNode(t, testenv.MustPostgresURL(t), testenv.MustRedis(t), patient,
		func(s *testServer) redis.UniversalClient {
			c := s.redis.Client()
			c.AddHook(&grabCalls)
			return c
		}, opts)
	open := s.createVoucher(t, seckillInput(1, 100))
	gated := s.createVoucher(t, gatedInput(100, "NONE"))
	const grabs = 20
	tickets := make([]string, grabs+1)
	for u := range tickets {
		tickets[u] = s.ticket(t, int64(1000+u), gated.ID)
	}
	// The first grab of each voucher loads it (fence, gate); measure after.
	if s.grab(t, 999, open.ID, "", "") != "OK" || s.grab(t, 1000, gated.ID, tickets[0], "") != "OK" {
		t.Fatal("first grabs failed")
	}
	measure := func(voucherID string, ticket func(u int) string) (router, gateCmds int64) {
		r0, g0 := grabCalls.Commands.Load(), s.gateCalls.Commands.Load()
		for u := 1; u <= grabs; u++ {
			if code := s.grab(t, int64(1000+u), voucherID, ticket(u), ""); code != "OK" {
				t.Fatalf("grab: %s", code)
			}
		}
		return grabCalls.Commands.Load() - r0, s.gateCalls.Commands.Load() - g0
	}
	openRouter, openGate := measure(open.ID, func(int) string { return "" })
	gatedRouter, gatedGate := measure(gated.ID, func(u int) string { return tickets[u] })
	t.Logf("Redis commands for %d grabs: open voucher %d (+%d gate), ticketed %d (+%d gate)", grabs, openRouter, openGate, gatedRouter, gatedGate)
	if gatedRouter != openRouter || gatedGate != 0 || openGate != 0 {
		t.Fatalf("ticketed grabs cost %d+%d Redis commands, open ones %d+%d", gatedRouter, gatedGate, openRouter, openGate)
	}
	// A refused grab costs no Redis call at all.
	r0, g0 := grabCalls.Commands.Load(), s.gateCalls.Commands.Load()
	if code := s.grab(t, 5000, gated.ID, tickets[1], ""); code != "FORBIDDEN" {
		t.Fatalf("grab with another user's ticket: %s", code)
	}
	if n := grabCalls.Commands.Load() - r0 + s.gateCalls.Commands.Load() - g0; n != 0 {
		t.Fatalf("a refused grab cost %d Redis commands", n)
	}
	// Nor does a blocked caller's grab or ticket request.
	s.mustDo(t, s.admin(t), `mutation { block(target: {userId: "1001"}) { userId } }`, nil, nil)
	// The block's own announcement comes back to this node and makes it
	// re-read the blocklist (3 commands, at any moment in the next
	// milliseconds): wait until that is done, so the measurement below
	// counts the refused caller's requests alone.
	for last, still := s.gateCalls.Commands.Load(), 0; still < 10; still++ {
		time.Sleep(20 * time.Millisecond)
		if n := s.gateCalls.Commands.Load(); n != last {
			last, still = n, 0
		}
	}
	r0, g0 = grabCalls.Commands.Load(), s.gateCalls.Commands.Load()
	if code := s.grab(t, 1001, gated.ID, tickets[1], ""); code != "FORBIDDEN" {
		t.Fatalf("a blocked user's grab: %s", code)
	}
	wantCode(t, s.do(t, s.token(t, 1001, auth.RoleUser), ticketQuery, map[string]any{"id": gated.ID}, nil), "FORBIDDEN")
	if n := grabCalls.Commands.Load() - r0 + s.gateCalls.Commands.Load() - g0; n != 0 {
		t.Fatalf("a blocked caller's grab and ticket request cost %d Redis commands", n)
	}
}

// A block reaches every node within a second, and lifting it (unblock or
// expiry) too. Two nodes share Redis and Postgres; the admin speaks to
// node A, the blocked caller to node B.
func TestBlocksReachEveryNode(t *testing.T) {
	t.Parallel()
	// Both nodes grab the same voucher on one Redis with no cluster
	// between them: production's segment lease would leave the voucher to
	// one of them, the other answering UNAVAILABLE. This test is about the
	// blocklist reaching every node, so its nodes take no segment lease.
	withoutLeases := func(o *actors.Options) { patient(o); o.Leases = nil }
	a := startNode(t, testenv.MustPostgresURL(t), testenv.MustRedis(t), withoutLeases, nil, testGateOptions)
	b := startNode(t, a.dbURL, a.redis, withoutLeases, nil, testGateOptions)
	v := a.createVoucher(t, seckillInput(1, 100))
	vb := a.createVoucher(t, seckillInput(1, 100))
	admin := a.admin(t)
	const blockMutation = `mutation($t: BlockTarget!, $s: Int) { block(target: $t, expiresInSeconds: $s) { userId ip voucherId expiresAt } }`
	const unblockMutation = `mutation($t: BlockTarget!) { unblock(target: $t) }`

	// within waits until every node answers want for the grab.
	within := func(t *testing.T, limit time.Duration, want string, grab func(s *testServer) string) time.Duration {
		t.Helper()
		began := time.Now()
		for _, n := range []*testServer{a, b} {
			for {
				code := grab(n)
				if code == want {
					break
				}
				if time.Since(began) > limit {
					t.Fatalf("after %s a node still answers %s, want %s", time.Since(began), code, want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		return time.Since(began)
	}

	t.Run("a user blocked globally, then unblocked", func(t *testing.T) {
		const user = 300
		target := map[string]any{"userId": user}
		a.mustDo(t, admin, blockMutation, map[string]any{"t": target}, nil)
		took := within(t, time.Second, "FORBIDDEN", func(n *testServer) string { return n.grab(t, user, v.ID, "", "") })
		t.Logf("block on every node after %s", took)
		wantCode(t, b.do(t, b.token(t, user, auth.RoleUser), ticketQuery, map[string]any{"id": v.ID}, nil), "FORBIDDEN")
		var out struct{ Unblock bool }
		a.mustDo(t, admin, unblockMutation, map[string]any{"t": target}, &out)
		if !out.Unblock {
			t.Fatal("unblock found no block")
		}
		within(t, time.Second, "admitted", func(n *testServer) string { return admitted(n.grab(t, user, v.ID, "", "")) })
	})
	t.Run("a network blocked for one voucher until it expires", func(t *testing.T) {
		const user = 400
		a.mustDo(t, admin, blockMutation, map[string]any{"t": map[string]any{"ip": "198.51.100.0/24", "voucherId": vb.ID}, "s": 2}, nil)
		within(t, time.Second, "FORBIDDEN", func(n *testServer) string { return n.grab(t, user, vb.ID, "", "198.51.100.7") })
		if code := b.grab(t, user+1, vb.ID, "", "203.0.113.9"); code != "OK" {
			t.Fatalf("an address outside the network: %s", code)
		}
		if code := b.grab(t, user+2, v.ID, "", "198.51.100.8"); code != "OK" {
			t.Fatalf("the network on another voucher: %s", code)
		}
		within(t, 3*time.Second, "admitted", func(n *testServer) string { return admitted(n.grab(t, user, vb.ID, "", "198.51.100.7")) })
	})
	var list struct{ Blocks []struct{ UserID *string } }
	a.mustDo(t, admin, `{ blocks { userId ip voucherId expiresAt } }`, nil, &list)
	if len(list.Blocks) != 0 {
		t.Fatalf("blocks still in force: %+v", list.Blocks)
	}
}

// admitted names the codes of a grab the gate let through: the first
// sells, a second of the same user reaches the per-user limit.
func admitted(code string) string {
	if code == "OK" || code == "LIMIT_REACHED" {
		return "admitted"
	}
	return code
}

// Admin changes a voucher's gate while it is paused; every node applies it.
func TestSetVoucherGateWhilePaused(t *testing.T) {
	t.Parallel()
	a := newServer(t)
	b := startNode(t, a.dbURL, a.redis, patient, nil, testGateOptions)
	v := a.createVoucher(t, seckillInput(1, 100))
	admin := a.admin(t)
	if code := b.grab(t, 100, v.ID, "", ""); code != "OK" { // node B caches the open gate
		t.Fatalf("open grab: %s", code)
	}
	const setGate = `mutation($id: ID!) { setVoucherGate(id: $id, requireTicket: true) { seckill { requireTicket challenge } } }`
	wantCode(t, a.do(t, admin, setGate, map[string]any{"id": v.ID}, nil), "BAD_USER_INPUT") // running sale
	a.mustDo(t, admin, `mutation($id: ID!) { setVoucherStatus(id: $id, status: PAUSED) { id } }`, map[string]any{"id": v.ID}, nil)
	var out struct {
		SetVoucherGate struct {
			Seckill struct {
				RequireTicket bool
				Challenge     string
			}
		}
	}
	a.mustDo(t, admin, setGate, map[string]any{"id": v.ID}, &out)
	if !out.SetVoucherGate.Seckill.RequireTicket {
		t.Fatalf("gate not changed: %+v", out)
	}
	a.mustDo(t, admin, `mutation($id: ID!) { setVoucherStatus(id: $id, status: ACTIVE) { id } }`, map[string]any{"id": v.ID}, nil)
	deadline := time.Now().Add(time.Second)
	for {
		code := b.grab(t, 101, v.ID, "", "")
		if code == "FORBIDDEN" {
			break
		}
		if code == "OK" {
			t.Fatal("node B sold without a ticket after the gate changed")
		}
		if time.Now().After(deadline) {
			t.Fatalf("node B still answers %s a second after the gate changed", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Node B's gate refreshed; its voucher activation learns of the resume
	// from its own announcement, which may come a moment later: PAUSED
	// until then (it changes nothing, so the grab is asked again).
	ticket := b.ticket(t, 101, v.ID)
	for {
		code := b.grab(t, 101, v.ID, ticket, "")
		if code == "OK" {
			break
		}
		if code != "PAUSED" || time.Now().After(deadline.Add(4*time.Second)) {
			t.Fatalf("grab with a ticket: %s", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A node that answered NOT_FOUND for an id before the voucher existed
// never sells it past its gate: until it re-reads the id it still answers
// NOT_FOUND, then FORBIDDEN without a ticket.
func TestVoucherCreatedAfterAGrabOfItsIdIsGated(t *testing.T) {
	t.Parallel()
	a := newServer(t)
	b := startNode(t, a.dbURL, a.redis, patient, nil, testGateOptions)
	first := a.createVoucher(t, seckillInput(1, 10))
	n, _ := strconv.ParseInt(first.ID, 10, 64)
	next := strconv.FormatInt(n+1, 10) // ids are the next free integer
	if code := b.grab(t, 100, next, "", ""); code != "NOT_FOUND" {
		t.Fatalf("grab of an unknown id: %s", code)
	}
	if v := a.createVoucher(t, gatedInput(10, "NONE")); v.ID != next {
		t.Fatalf("created %s, want %s", v.ID, next)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		code := b.grab(t, 100, next, "", "")
		if code == "FORBIDDEN" {
			break
		}
		if code != "NOT_FOUND" || time.Now().After(deadline) {
			t.Fatalf("grab without a ticket of the new gated voucher: %s", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
