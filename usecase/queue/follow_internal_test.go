package queue

import (
	"testing"
	"time"

	"flashsale/domain"
)

// A subscriber is sent a new state at once, a position that moved by 5 %
// or more at once, a smaller move only a second after the last send, and
// nothing when nothing moved.
func TestASubscriberIsSentMeaningfulChangesOnly(t *testing.T) {
	t.Parallel()
	sb := &sub{wake: make(chan struct{}, 1)}
	at := time.Unix(1000, 0)
	place := func(st domain.QueueState, pos int) domain.QueuePlace {
		return domain.QueuePlace{State: st, Position: pos}
	}
	sb.sent, sb.sentAt = place(domain.QueueWaiting, 1000), at
	for i, tc := range []struct {
		p    domain.QueuePlace
		now  time.Time
		sent bool
	}{
		{place(domain.QueueWaiting, 1000), at.Add(2 * time.Second), false},       // nothing moved
		{place(domain.QueueWaiting, 990), at.Add(100 * time.Millisecond), false}, // 1 %, within a second
		{place(domain.QueueWaiting, 990), at.Add(time.Second), true},             // 1 %, a second later
		{place(domain.QueueWaiting, 940), at.Add(1100 * time.Millisecond), true}, // 5 %
		{place(domain.QueueSoldOut, 0), at.Add(1150 * time.Millisecond), true},   // a new state
	} {
		sb.offer(tc.p, tc.now)
		p, ok, _ := sb.take()
		if ok != tc.sent || ok && p != tc.p {
			t.Fatalf("step %d: sent %v (%+v), want %v", i, ok, p, tc.sent)
		}
		if ok {
			sb.sentAt = tc.now
		}
	}
}
