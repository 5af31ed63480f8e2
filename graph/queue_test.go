package graph_test

import (
	"testing"
	"time"

	"flashsale/internal/auth"
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
