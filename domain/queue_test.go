package domain_test

import (
	"testing"
	"time"

	"flashsale/domain"
)

// PlaceOf: what a view of the room shows its user.
func TestPlaceOfAView(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000)
	open, end := now.Add(-time.Minute), now.Add(time.Hour)
	base := domain.RoomView{Found: true, Now: now, Open: open, End: end, Waiting: 10, Stock: 5, Joined: true, Rank: 3, Rate: 2}
	for _, tc := range []struct {
		name  string
		view  func(v *domain.RoomView)
		ok    bool
		state domain.QueueState
		pos   int
		wait  time.Duration
	}{
		{"waiting", func(*domain.RoomView) {}, true, domain.QueueWaiting, 4, 2 * time.Second},
		{"early", func(v *domain.RoomView) { v.Open = now.Add(time.Minute) }, true, domain.QueueEarly, 4, 0},
		{"sold out", func(v *domain.RoomView) { v.Stock = 0 }, true, domain.QueueSoldOut, 0, 0},
		{"admitted", func(v *domain.RoomView) { v.Rank, v.Expiry = -1, now.Add(time.Minute) }, true, domain.QueueAdmitted, 0, 0},
		{"admission expired", func(v *domain.RoomView) { v.Rank, v.Expiry = -1, now }, true, domain.QueueClosed, 0, 0},
		{"sale ended", func(v *domain.RoomView) { v.End = now }, true, domain.QueueClosed, 0, 0},
		{"paused: no estimate", func(v *domain.RoomView) { v.Paused = true }, true, domain.QueueWaiting, 4, 0},
		{"never joined", func(v *domain.RoomView) { v.Joined = false }, false, 0, 0, 0},
		{"no room", func(v *domain.RoomView) { v.Found = false }, false, 0, 0, 0},
	} {
		v := base
		tc.view(&v)
		p, ok := domain.PlaceOf(7, v)
		if ok != tc.ok || p.State != tc.state || p.Position != tc.pos || p.EstimatedWait != tc.wait {
			t.Errorf("%s: %+v %v, want state %d position %d wait %v ok %v", tc.name, p, ok, tc.state, tc.pos, tc.wait, tc.ok)
		}
		if ok && p.VoucherID != 7 {
			t.Errorf("%s: voucher %d", tc.name, p.VoucherID)
		}
	}
}
