package queue

import (
	"context"
	"sync"
	"time"

	"flashsale/domain"
)

// Following a place (the queueChanged subscription). One watcher per room
// on a node reads the room's counters (one Redis call) every WatchEvery,
// whatever the number of its subscribers; each subscriber's place follows
// from the place read when it subscribed: after the opening nobody joins
// ahead of anyone, so a place moves up by the admissions since. A
// subscriber's own place is read again only when that arithmetic cannot
// say: its admission is due (for the ticket), the room opened while it
// was early (the early ones' order is theirs only from then), the room
// was emptied, or its ticket expired. A place is sent when its state
// changes, and its position when it moved by 5 % or more, or once a
// second: a million waiting is not a million messages per admission.

// WatchEvery is how often a room's watcher reads its counters: a sell-out
// reaches every subscriber within it.
const WatchEvery = 250 * time.Millisecond

// resendEvery is how often a moving position is sent when it moved by
// less than 5 %.
const resendEvery = time.Second

// sub is one subscriber.
type sub struct {
	user, voucher int64
	wake          chan struct{} // one pending wake, coalesced

	mu       sync.Mutex
	latest   domain.QueuePlace // to send
	pending  bool
	sent     domain.QueuePlace // the last sent
	sentAt   time.Time
	rank0    int   // the place's rank when last read exactly
	admitted int64 // the room's admissions at that read
	gone     bool  // the place was lost: the subscription ends
}

// watcher reads one room for the node's subscribers.
type watcher struct {
	subs   map[*sub]struct{}
	cancel context.CancelFunc
}

// Subscribe sends the caller's place in the voucher's room at once, then
// its changes, until ctx ends (then done runs) or send returns false. A
// caller without a place is refused: they join first.
func (s *Service) Subscribe(ctx context.Context, user, voucher int64, send func(domain.QueuePlace) bool, done func()) error {
	v, err := s.store.Place(ctx, voucher, user)
	if err != nil {
		return unavailable(err)
	}
	p, ok := s.placeOf(user, voucher, v)
	if !ok {
		return domain.InvalidField("voucherId", "you have no place in the waiting room of voucher %d: join it first (joinQueue)", voucher)
	}
	sb := &sub{user: user, voucher: voucher, wake: make(chan struct{}, 1), rank0: v.Rank, admitted: v.Admitted}
	sb.latest, sb.pending = p, true
	sb.wake <- struct{}{}
	s.watch(sb)
	go func() {
		defer done()
		defer s.unwatch(sb)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sb.wake:
			}
			p, ok, gone := sb.take()
			if ok && !send(p) || gone {
				return
			}
		}
	}()
	return nil
}

// placeOf is PlaceOf with the admission's ticket.
func (s *Service) placeOf(user, voucher int64, v domain.RoomView) (domain.QueuePlace, bool) {
	p, ok := domain.PlaceOf(voucher, v)
	if ok && p.State == domain.QueueAdmitted {
		p.Ticket = s.tickets.IssueAdmission(user, voucher, p.ExpiresAt)
	}
	return p, ok
}

// take is the place to send, if any, and whether the subscription ends.
func (sb *sub) take() (domain.QueuePlace, bool, bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if !sb.pending {
		return domain.QueuePlace{}, false, sb.gone
	}
	sb.pending = false
	sb.sent, sb.sentAt = sb.latest, time.Now()
	return sb.latest, true, sb.gone
}

// offer sets the place to send when it differs enough from the last one
// sent, and wakes the subscriber.
func (sb *sub) offer(p domain.QueuePlace, now time.Time) {
	sb.mu.Lock()
	last := sb.sent
	if sb.pending {
		last = sb.latest
	}
	moved := p.Position != last.Position
	big := last.Position > 0 && abs(p.Position-last.Position)*20 >= last.Position
	if p.State == last.State && (!moved || !big && now.Sub(sb.sentAt) < resendEvery) {
		sb.mu.Unlock()
		return
	}
	sb.latest, sb.pending = p, true
	sb.mu.Unlock()
	select {
	case sb.wake <- struct{}{}:
	default:
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// watch adds a subscriber to its room's watcher, starting it.
func (s *Service) watch(sb *sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchers == nil {
		s.watchers = map[int64]*watcher{}
	}
	w := s.watchers[sb.voucher]
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &watcher{subs: map[*sub]struct{}{}, cancel: cancel}
		s.watchers[sb.voucher] = w
		s.watching.Add(1)
		go func() {
			defer s.watching.Done()
			s.runWatcher(ctx, sb.voucher, w)
		}()
	}
	w.subs[sb] = struct{}{}
	subscribers.Inc()
}

// unwatch removes a subscriber, stopping its room's watcher after the
// last.
func (s *Service) unwatch(sb *sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watchers[sb.voucher]
	if w == nil {
		return
	}
	if _, ok := w.subs[sb]; ok {
		delete(w.subs, sb)
		subscribers.Dec()
	}
	if len(w.subs) == 0 {
		w.cancel()
		delete(s.watchers, sb.voucher)
	}
}

// runWatcher reads the room every WatchEvery and offers each subscriber
// its place.
func (s *Service) runWatcher(ctx context.Context, voucher int64, w *watcher) {
	t := time.NewTicker(WatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		room, err := s.store.Place(rctx, voucher, 0)
		cancel()
		if err != nil {
			continue // the next tick reads again; the places stay as sent
		}
		s.mu.Lock()
		subs := make([]*sub, 0, len(w.subs))
		for sb := range w.subs {
			subs = append(subs, sb)
		}
		s.mu.Unlock()
		now := time.Now()
		for _, sb := range subs {
			if ctx.Err() != nil {
				return
			}
			s.follow(ctx, sb, room, now)
		}
	}
}

// follow offers one subscriber its place after a read of its room.
func (s *Service) follow(ctx context.Context, sb *sub, room domain.RoomView, now time.Time) {
	sb.mu.Lock()
	last, rank0, admitted0 := sb.latest, sb.rank0, sb.admitted
	sb.mu.Unlock()
	exact := false
	v := room
	v.Joined = true
	switch {
	case last.State == domain.QueueClosed:
		return
	case last.State == domain.QueueAdmitted:
		if room.Now.Before(last.ExpiresAt) {
			return
		}
		exact = true // expired unused, or the sale ended
	case !room.Found, room.Admitted < admitted0,
		last.State == domain.QueueEarly && !room.Now.Before(room.Open):
		exact = true
	default:
		v.Rank = rank0 - int(room.Admitted-admitted0)
		exact = v.Rank < 0 // its admission is due: the ticket
	}
	if exact {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		read, err := s.store.Place(rctx, sb.voucher, sb.user)
		cancel()
		if err != nil {
			return
		}
		v = read
		sb.mu.Lock()
		sb.rank0, sb.admitted = v.Rank, v.Admitted
		sb.mu.Unlock()
	}
	p, ok := s.placeOf(sb.user, sb.voucher, v)
	if !ok {
		// The place was lost with Redis's state: the subscription ends,
		// and the client asks queuePlace or joins again.
		sb.mu.Lock()
		sb.gone = true
		sb.mu.Unlock()
		select {
		case sb.wake <- struct{}{}:
		default:
		}
		return
	}
	sb.offer(p, now)
}
