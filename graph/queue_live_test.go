package graph_test

import (
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/nodetest"
)

const queueSub = `subscription($v: ID!) { queueChanged(voucherId: $v) { state position waiting ticket expiresAt } }`

type queueEvent struct {
	QueueChanged struct {
		State    string
		Position *int
		Waiting  int
		Ticket   *string
	}
}

// queueChanged: the place at once, then its changes, on a node other
// than the one the user joined on: the admission with its ticket, and
// SOLD_OUT within a second of the last unit for those still waiting.
func TestQueueChangedFollowsThePlaceToAdmissionAndSellOut(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 2)
	v := s.createVoucher(t, roomInput(1, 1000, 1))
	for _, u := range []int64{301, 302, 303} {
		s.joinQueue(t, u, v.ID)
	}
	token := s.token(t, 303, auth.RoleUser)
	c := nodetest.InitWS(t, nodes[1].http, token)
	wantCode(t, s.do(t, s.token(t, 999, auth.RoleUser), `subscription($v: ID!) { queueChanged(voucherId: $v) { state } }`, map[string]any{"v": v.ID}, nil), "BAD_USER_INPUT")
	subscribeWS(t, c, "q", queueSub, map[string]any{"v": v.ID})
	var first queueEvent
	nextData(t, c, "q", 5*time.Second, &first)
	if p := first.QueueChanged; p.State != "WAITING" || p.Position == nil || *p.Position < 1 {
		t.Fatalf("the place at once: %+v, want WAITING with a position", p)
	}
	var admitted *placeData
	for _, u := range []int64{301, 302} {
		if p := s.queuePlace(t, u, v.ID); p.State == "ADMITTED" {
			admitted = p
			if code := s.grab(t, u, v.ID, *p.Ticket, ""); code != "OK" {
				t.Fatalf("the admitted grabs: %s", code)
			}
		}
	}
	if admitted == nil {
		// Not admitted yet: the first in line has its turn within a tick.
		time.Sleep(300 * time.Millisecond)
		if p := s.queuePlace(t, 301, v.ID); p.State == "ADMITTED" {
			if code := s.grab(t, 301, v.ID, *p.Ticket, ""); code != "OK" {
				t.Fatalf("the admitted grabs: %s", code)
			}
		} else {
			t.Fatalf("nobody admitted: %+v", p)
		}
	}
	soldAt := time.Now()
	for {
		var e queueEvent
		nextData(t, c, "q", 3*time.Second, &e)
		if e.QueueChanged.State == "SOLD_OUT" {
			if took := time.Since(soldAt); took > time.Second+WatchSlack {
				t.Fatalf("SOLD_OUT reached the line %v after the last unit sold, want within 1 s", took)
			}
			if e.QueueChanged.Position != nil {
				t.Fatalf("SOLD_OUT with a position: %+v", e.QueueChanged)
			}
			return
		}
	}
}

// WatchSlack is what a loaded test machine adds to the second a sell-out
// may take to reach the line (a watcher's read, a websocket write).
const WatchSlack = 250 * time.Millisecond

// The subscriber's admission arrives with its ticket, which grabs.
func TestQueueChangedBringsTheAdmissionsTicket(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 1)
	v := s.createVoucher(t, roomInput(2, 1000, 1))
	s.joinQueue(t, 401, v.ID)
	s.joinQueue(t, 402, v.ID)
	c := nodetest.InitWS(t, nodes[0].http, s.token(t, 402, auth.RoleUser))
	subscribeWS(t, c, "q", queueSub, map[string]any{"v": v.ID})
	var e queueEvent
	nextData(t, c, "q", 5*time.Second, &e)
	if e.QueueChanged.State != "WAITING" {
		t.Fatalf("second in line with one open ticket allowed: %+v", e.QueueChanged)
	}
	var first *placeData
	for first == nil || first.State != "ADMITTED" {
		first = s.queuePlace(t, 401, v.ID)
		time.Sleep(20 * time.Millisecond)
	}
	if code := s.grab(t, 401, v.ID, *first.Ticket, ""); code != "OK" {
		t.Fatalf("the first grabs: %s", code)
	}
	for e.QueueChanged.State != "ADMITTED" {
		nextData(t, c, "q", 3*time.Second, &e)
	}
	if e.QueueChanged.Ticket == nil || e.QueueChanged.Position != nil {
		t.Fatalf("the admission as sent: %+v, want a ticket and no position", e.QueueChanged)
	}
	if code := s.grab(t, 402, v.ID, *e.QueueChanged.Ticket, ""); code != "OK" {
		t.Fatalf("a grab with the ticket the subscription brought: %s", code)
	}
}
