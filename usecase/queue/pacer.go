package queue

import (
	"context"
	"errors"
	"maps"
	"time"

	"flashsale/domain"
	"flashsale/internal/maintenance"
)

// Pacer returns the job that runs every open room's admissions every
// Tick on this node, under no lease: each room's bucket lives in Redis,
// so the nodes' pacers together admit at the room's pace, and a node's
// death stops none. A run reports how many it admitted.
func (s *Service) Pacer() *maintenance.Job[int] {
	var refreshed time.Time
	return maintenance.New(maintenance.Config{Name: "waiting-room-pacer", Interval: s.opts.Tick, Timeout: time.Second}, s.log,
		func(ctx context.Context) (int, error) {
			var errs []error
			if time.Since(refreshed) >= s.opts.Refresh {
				if err := s.refresh(ctx); err != nil {
					errs = append(errs, err)
				} else {
					refreshed = time.Now()
				}
			}
			n, err := s.admit(ctx)
			return n, errors.Join(append(errs, err)...)
		})
}

// refresh re-reads the open rooms from the database and writes each
// one's settings to Redis (a room lost with Redis's data is made again;
// a change written to the database but not to Redis reaches it).
func (s *Service) refresh(ctx context.Context) error {
	vs, err := s.vouchers.Rooms(ctx, time.Now())
	if err != nil {
		return err
	}
	rooms := make(map[int64]struct{}, len(vs))
	var errs []error
	for _, v := range vs {
		if v.Seckill == nil {
			continue
		}
		rooms[v.ID] = struct{}{}
		s.pace(v.ID, *v.Seckill)
		if err := s.store.Configure(ctx, v.ID, s.settings(*v.Seckill)); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	for id := range s.rooms {
		if _, ok := rooms[id]; !ok {
			delete(s.rooms, id) // ended, or deleted
		}
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// admit runs each room's admissions once.
func (s *Service) admit(ctx context.Context) (int, error) {
	s.mu.Lock()
	rooms := maps.Clone(s.rooms)
	s.mu.Unlock()
	total, waitingAll := 0, 0
	var errs []error
	for id, sk := range rooms {
		a, err := s.store.Admit(ctx, id, s.opts.TicketTTL, s.opts.MostPerTick)
		if s.opts.IsRoomMissing(err) {
			err = s.store.Configure(ctx, id, s.settings(sk)) // it admits at the next run
		}
		if err != nil {
			errs = append(errs, err)
		}
		// An admission short of acknowledgements still happened: it is
		// counted, and its error reported.
		if a.Found {
			s.observe(id, sk, a)
			total += len(a.Users)
			waitingAll += a.Waiting
		}
	}
	waiting.Set(float64(waitingAll))
	return total, errors.Join(errs...)
}

// observe records one admission run's numbers.
func (s *Service) observe(voucher int64, sk domain.Seckill, a domain.Admission) {
	if a.Reset {
		s.emptied(voucher)
	}
	expiredTickets.Add(float64(a.Expired))
	admitted.Add(float64(len(a.Users)))
	opened := sk.BeginAt.Add(-s.opts.ReleaseBefore)
	for _, u := range a.Users {
		from := u.JoinedAt
		if from.IsZero() || from.Before(opened) {
			from = opened // an early one waits from the opening
		}
		admissionWait.Observe(a.Now.Sub(from).Seconds())
	}
}
