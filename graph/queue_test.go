package graph_test

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

const joinQueueMutation = `mutation($id: ID!) { joinQueue(voucherId: $id) { voucherId state position waiting estimatedWaitMs ticket expiresAt } }`

const queuePlaceQuery = `query($id: ID!) { queuePlace(voucherId: $id) { voucherId state position waiting estimatedWaitMs ticket expiresAt } }`

type placeData struct {
	VoucherID       string
	State           string
	Position        *int
	Waiting         int
	EstimatedWaitMs *int
	Ticket          *string
	ExpiresAt       *time.Time
}

// roomInput is a running seckill voucher with a waiting room.
func roomInput(stock, rate, most int) map[string]any {
	in := seckillInput(1, stock)
	in["waitingRoom"], in["admitPerSecond"], in["maxActive"] = true, rate, most
	return in
}

func (s *testServer) joinQueue(tb testing.TB, user int64, voucherID string) placeData {
	tb.Helper()
	var out struct{ JoinQueue placeData }
	s.mustDo(tb, s.token(tb, user, auth.RoleUser), joinQueueMutation, map[string]any{"id": voucherID}, &out)
	return out.JoinQueue
}

// joinUntil joins as user, again after an UNAVAILABLE until by (joining
// twice is one place): under -race beside the other packages a node's
// Redis call times out now and then. The errors are the last answer's.
func (s *testServer) joinUntil(tb testing.TB, user int64, voucherID string, by time.Time) (placeData, []gqlError) {
	tb.Helper()
	token := s.token(tb, user, auth.RoleUser)
	for {
		var out struct{ JoinQueue placeData }
		errs := s.do(tb, token, joinQueueMutation, map[string]any{"id": voucherID}, &out)
		if len(errs) == 0 || errs[0].code() != "UNAVAILABLE" || time.Now().After(by) {
			return out.JoinQueue, errs
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *testServer) queuePlace(tb testing.TB, user int64, voucherID string) *placeData {
	tb.Helper()
	var out struct{ QueuePlace *placeData }
	s.mustDo(tb, s.token(tb, user, auth.RoleUser), queuePlaceQuery, map[string]any{"id": voucherID}, &out)
	return out.QueuePlace
}

// A voucher with a waiting room sells only to those its line admitted,
// in order, at most its open tickets at once and never more than the
// units left: seckillTicket refuses it, a grab without the admission's
// ticket (or with another user's) is FORBIDDEN, a sale frees its slot,
// and once the stock is gone the rest of the line hears SOLD_OUT.
func TestAWaitingRoomAdmitsInOrderAndOnlyItsTicketsGrab(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, roomInput(2, 1000, 2))
	user := s.token(t, 101, auth.RoleUser)

	wantCode(t, s.do(t, user, ticketQuery, map[string]any{"id": v.ID}, nil), "FORBIDDEN")
	if code := s.grab(t, 101, v.ID, "", ""); code != "FORBIDDEN" {
		t.Fatalf("a grab without an admission: %s, want FORBIDDEN", code)
	}
	if p := s.queuePlace(t, 101, v.ID); p != nil {
		t.Fatalf("a place before joining: %+v, want null", p)
	}
	for u := int64(101); u <= 104; u++ {
		if p := s.joinQueue(t, u, v.ID); p.State != "WAITING" && p.State != "ADMITTED" {
			t.Fatalf("user %d joined: %+v", u, p)
		}
	}
	var first, second *placeData
	testenv.WaitFor(t, "the pacer to admit the first two", func() bool {
		first, second = s.queuePlace(t, 101, v.ID), s.queuePlace(t, 102, v.ID)
		return first.State == "ADMITTED" && second.State == "ADMITTED"
	})
	if first.Ticket == nil || first.ExpiresAt == nil || first.Position != nil {
		t.Fatalf("an admitted place: %+v, want a ticket and its expiry, no position", first)
	}
	for i, u := range []int64{103, 104} {
		p := s.queuePlace(t, u, v.ID)
		if p.State != "WAITING" || p.Position == nil || *p.Position != i+1 || p.Waiting != 2 || p.EstimatedWaitMs == nil {
			t.Fatalf("user %d, %d. in line behind two admitted with 2 units: %+v", u, i+1, p)
		}
	}
	if again := s.joinQueue(t, 101, v.ID); again.State != "ADMITTED" || *again.Ticket != *first.Ticket {
		t.Fatalf("joining again: %+v, want the same admission", again)
	}
	if code := s.grab(t, 103, v.ID, *first.Ticket, ""); code != "FORBIDDEN" {
		t.Fatalf("a grab with another user's admission: %s, want FORBIDDEN", code)
	}
	if code := s.grab(t, 101, v.ID, *first.Ticket, ""); code != "OK" {
		t.Fatalf("the first admitted grabs: %s, want OK", code)
	}
	if code := s.grab(t, 102, v.ID, *second.Ticket, ""); code != "OK" {
		t.Fatalf("the second admitted grabs: %s, want OK", code)
	}
	// The sales freed both slots, and no unit is left: nobody else is
	// admitted, and the line hears it.
	time.Sleep(300 * time.Millisecond)
	for _, u := range []int64{103, 104} {
		if p := s.queuePlace(t, u, v.ID); p.State != "SOLD_OUT" || p.Position != nil {
			t.Fatalf("user %d after the last unit sold: %+v, want SOLD_OUT", u, p)
		}
	}
}

// The room's settings: shown on the voucher, changed live by an admin
// only, and refused where they mean nothing.
func TestAWaitingRoomsSettings(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	const set = `mutation($id: ID!, $rate: Int, $max: Int, $paused: Boolean) {
  setWaitingRoom(voucherId: $id, admitPerSecond: $rate, maxActive: $max, paused: $paused) { seckill { waitingRoom admitPerSecond maxActive roomPaused } } }`
	type room struct {
		WaitingRoom    bool
		AdmitPerSecond *int
		MaxActive      *int
		RoomPaused     *bool
	}
	// A pace of 0 is refused, not taken for the default; a pace without a
	// room means nothing.
	wantCode(t, s.do(t, s.admin(t), createSeckill, map[string]any{"in": roomInput(5, 0, 10)}, nil), "BAD_USER_INPUT")
	noRoom := seckillInput(1, 5)
	noRoom["admitPerSecond"] = 10
	wantCode(t, s.do(t, s.admin(t), createSeckill, map[string]any{"in": noRoom}, nil), "BAD_USER_INPUT")
	var out struct{ SetWaitingRoom struct{ Seckill room } }
	plain := s.createVoucher(t, seckillInput(1, 5))
	wantCode(t, s.do(t, s.admin(t), set, map[string]any{"id": plain.ID, "paused": true}, nil), "BAD_USER_INPUT")
	defaults := seckillInput(1, 5)
	defaults["waitingRoom"] = true
	r := s.createVoucher(t, defaults)
	wantCode(t, s.do(t, s.token(t, 7, auth.RoleUser), set, map[string]any{"id": r.ID, "paused": true}, nil), "FORBIDDEN")
	wantCode(t, s.do(t, s.admin(t), set, map[string]any{"id": r.ID, "rate": 0}, nil), "BAD_USER_INPUT")
	s.mustDo(t, s.admin(t), set, map[string]any{"id": r.ID, "rate": 5, "paused": true}, &out)
	if got := out.SetWaitingRoom.Seckill; !got.WaitingRoom || *got.AdmitPerSecond != 5 || *got.MaxActive != 1000 || !*got.RoomPaused {
		t.Fatalf("after setWaitingRoom: %+v, want rate 5, the default 1000 open tickets, paused", got)
	}
}

// A sale uses its buyer's admission up: the next in line is admitted at
// once, not when the used ticket would have expired (TICKET_TTL, 2 min).
func TestASaleFreesItsAdmissionForTheNextInLine(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, roomInput(3, 1000, 1))
	s.joinQueue(t, 201, v.ID)
	s.joinQueue(t, 202, v.ID)
	var p *placeData
	testenv.WaitFor(t, "the first in line to be admitted", func() bool {
		p = s.queuePlace(t, 201, v.ID)
		return p.State == "ADMITTED"
	})
	if next := s.queuePlace(t, 202, v.ID); next.State != "WAITING" {
		t.Fatalf("the second in line with one open ticket allowed: %+v, want WAITING", next)
	}
	if code := s.grab(t, 201, v.ID, *p.Ticket, ""); code != "OK" {
		t.Fatalf("the admitted grabs: %s", code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.queuePlace(t, 202, v.ID).State != "ADMITTED" {
		if time.Now().After(deadline) {
			t.Fatal("the next in line was not admitted within 5 s of the sale that used the first admission up")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A sale through a waiting room, end to end on one node (TICKET_RELEASE_
// BEFORE 2 s, so the room opens 2 s after the voucher's creation and the
// sale a second later): 40 users join early and 80 after the opening,
// one at a time, and every user grabs once their place (read every
// 150 ms, a read answered UNAVAILABLE read again: under -race beside the
// other packages, 180 users reading every 50 ms timed the node's Redis
// calls out) says ADMITTED. Redis's record of the admissions (each ticket's expiry, the
// admission time plus TICKET_TTL) then shows that every early user was
// admitted no later than any later arrival, the later arrivals in the
// order they came, never faster than the pace (30 a second, plus a
// second's worth), and that every OK'd grab was an admitted user's, the
// stock (60) sold exactly. (The load tool's -queue scenario runs the
// issue's 20,000.)
func TestAWaitingRoomSaleKeepsItsOrderPaceAndStock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 5 s sale")
	}
	base := launch(t, setup{dbURL: testenv.MustPostgresURL(t), redis: testenv.MustRedis(t), actors: patient, gate: testGateOptions,
		env: map[string]string{"TICKET_RELEASE_BEFORE": "2s"}})
	s := base
	const stock, rate, early, late = 60, 30, 40, 80
	in := roomInput(stock, rate, 25)
	begin := time.Now().Add(3 * time.Second)
	in["beginAt"] = begin.UTC().Format(time.RFC3339Nano)
	v := s.createVoucher(t, in)
	open := begin.Add(-2 * time.Second)

	var wg sync.WaitGroup
	for u := int64(1); u <= early; u++ {
		wg.Go(func() {
			// Retried only while a retry is still before the opening.
			p, errs := s.joinUntil(t, u, v.ID, open.Add(-200*time.Millisecond))
			if len(errs) > 0 {
				t.Errorf("user %d joins: %v", u, errs)
			} else if p.State != "EARLY" {
				t.Errorf("user %d joined before the opening: %+v, want EARLY", u, p)
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Until(open) + 50*time.Millisecond)
	for u := int64(early + 1); u <= early+late; u++ {
		p, errs := s.joinUntil(t, u, v.ID, time.Now().Add(10*time.Second))
		if len(errs) > 0 {
			t.Fatalf("user %d joins: %v", u, errs)
		}
		if p.State == "EARLY" {
			t.Fatalf("user %d joined after the opening: %+v", u, p)
		}
	}
	// Every user grabs once admitted, until the sale is over for them.
	var mu sync.Mutex
	sold := map[int64]bool{}
	for u := int64(1); u <= early+late; u++ {
		wg.Go(func() {
			token := s.token(t, u, auth.RoleUser)
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(150 * time.Millisecond) {
				var out struct{ QueuePlace *placeData }
				if errs := s.do(t, token, queuePlaceQuery, map[string]any{"id": v.ID}, &out); len(errs) > 0 {
					if errs[0].code() != "UNAVAILABLE" {
						t.Errorf("user %d's place: %v", u, errs)
						return
					}
					continue
				}
				p := out.QueuePlace
				switch {
				case p == nil:
					t.Errorf("user %d lost their place", u)
					return
				case p.State == "SOLD_OUT", p.State == "CLOSED":
					return
				case p.State != "ADMITTED" || time.Now().Before(begin):
					continue
				}
				// LIMIT_REACHED: an earlier grab answered UNAVAILABLE sold
				// (its outcome was undecided); the user holds their unit.
				switch code := s.grab(t, u, v.ID, *p.Ticket, ""); code {
				case "OK", "LIMIT_REACHED":
					mu.Lock()
					sold[u] = true
					mu.Unlock()
					return
				case "SOLD_OUT":
					return
				}
			}
			t.Errorf("user %d neither bought nor heard SOLD_OUT in 30 s", u)
		})
	}
	wg.Wait()
	if len(sold) != stock {
		t.Fatalf("%d sold, want the stock, %d", len(sold), stock)
	}

	expiries, err := s.rdb.HGetAll(t.Context(), persistence.AdmissionsKey(mustID(t, v.ID))).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := map[int64]int64{} // user -> admission, unix ms (all tickets live as long)
	for k, e := range expiries {
		u, _ := strconv.ParseInt(k, 10, 64)
		at[u], _ = strconv.ParseInt(e, 10, 64)
	}
	for u := range sold {
		if _, ok := at[u]; !ok {
			t.Fatalf("user %d bought without an admission", u)
		}
	}
	lastEarly := int64(0)
	for u := int64(1); u <= early; u++ {
		if at[u] == 0 {
			t.Fatalf("early user %d was not admitted (%d admitted in all): the early ones come first", u, len(at))
		}
		lastEarly = max(lastEarly, at[u])
	}
	prev := int64(0)
	for u := int64(early + 1); u <= early+late; u++ {
		a, ok := at[u]
		if !ok {
			continue // not reached before the stock ran out
		}
		if a < lastEarly {
			t.Fatalf("later user %d admitted at %d, before the last early one (%d)", u, a, lastEarly)
		}
		if a < prev {
			t.Fatalf("later user %d admitted at %d, before the one who came before them (%d)", u, a, prev)
		}
		prev = a
	}
	times := make([]int64, 0, len(at))
	for _, a := range at {
		times = append(times, a)
	}
	slices.Sort(times)
	for i := range times {
		for j := i + 1; j < len(times); j++ {
			if n, most := j-i+1, rate+int(float64(rate)*float64(times[j]-times[i])/1000)+1; n > most {
				t.Fatalf("%d admitted within %d ms at %d a second, want at most %d", n, times[j]-times[i], rate, most)
			}
		}
	}
	t.Logf("%d admitted over %d ms, %d sold", len(at), times[len(times)-1]-times[0], len(sold))
}

func mustID(tb testing.TB, id string) int64 {
	tb.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
