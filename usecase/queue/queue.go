// Package queue is the waiting room in front of a voucher's sale: a
// line each user joins once, the early ones (before grab tickets are
// released) in a uniformly random order and the rest in order of arrival,
// admitted at the shop's pace with grab tickets. The line and the
// admissions live in Redis beside the voucher's keys (persistence.Queue),
// so that a place survives a node's death and every node sees one line;
// every node runs the pacer, whose bucket lives in Redis too.
package queue

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"flashsale/domain"
)

// Store is the rooms' store (persistence.Queue).
type Store interface {
	Configure(ctx context.Context, voucherID int64, s domain.RoomSettings) error
	Join(ctx context.Context, voucherID, userID int64) (joined, reset bool, err error)
	Place(ctx context.Context, voucherID, userID int64) (domain.RoomView, error)
	Admit(ctx context.Context, voucherID int64, ttl time.Duration, most int) (domain.Admission, error)
}

// Gate is the grab gate's part of a join (gate.Service).
type Gate interface {
	Join(ctx context.Context, user int64, ip string, voucher int64, challenge, nonce string) (domain.Seckill, error)
}

// Tickets issues an admission's grab ticket (gate.Tickets).
type Tickets interface {
	IssueAdmission(user, voucher int64, expires time.Time) string
}

// Vouchers is the voucher record (persistence.Vouchers).
type Vouchers interface {
	Get(ctx context.Context, id int64) (domain.Voucher, error)
	SetWaitingRoom(ctx context.Context, id int64, change domain.RoomChange) (domain.Voucher, error)
	// Rooms lists the seckill vouchers with a waiting room whose sale
	// has not ended at now.
	Rooms(ctx context.Context, now time.Time) ([]domain.Voucher, error)
}

// Options configure the service; zero values take the defaults.
type Options struct {
	// ReleaseBefore is when a room opens: this long before the sale
	// begins, as grab tickets are released (TICKET_RELEASE_BEFORE).
	ReleaseBefore time.Duration
	// TicketTTL is how long an admission's ticket is valid (TICKET_TTL).
	TicketTTL time.Duration
	// Tick is how often the pacer admits; MostPerTick bounds one run.
	Tick        time.Duration
	MostPerTick int
	// Refresh is how often the list of open rooms is re-read.
	Refresh time.Duration
	// KeepAfterEnd is how long a room's keys outlive its sale.
	KeepAfterEnd time.Duration
	// IsRoomMissing tells the store's ErrRoomMissing.
	IsRoomMissing func(error) bool
}

// Defaults of Options (the first two are the gate's).
const (
	ReleaseBeforeDefault = 60 * time.Second
	TicketTTLDefault     = 120 * time.Second
	TickDefault          = 100 * time.Millisecond
	MostPerTickDefault   = 1000
	RefreshDefault       = 5 * time.Second
	KeepAfterEndDefault  = time.Hour
)

// Service is the waiting rooms of one node.
type Service struct {
	store    Store
	gate     Gate
	tickets  Tickets
	vouchers Vouchers
	log      *slog.Logger
	opts     Options

	mu       sync.Mutex
	rooms    map[int64]domain.Seckill // the open rooms this node paces
	watchers map[int64]*watcher       // the rooms this node's subscribers follow (follow.go)
	watching sync.WaitGroup
}

// New returns the service; Pacer runs the admissions.
func New(store Store, gate Gate, tickets Tickets, vouchers Vouchers, log *slog.Logger, opts Options) *Service {
	opts.ReleaseBefore = cmp.Or(opts.ReleaseBefore, ReleaseBeforeDefault)
	opts.TicketTTL = cmp.Or(opts.TicketTTL, TicketTTLDefault)
	opts.Tick = cmp.Or(opts.Tick, TickDefault)
	opts.MostPerTick = cmp.Or(opts.MostPerTick, MostPerTickDefault)
	opts.Refresh = cmp.Or(opts.Refresh, RefreshDefault)
	opts.KeepAfterEnd = cmp.Or(opts.KeepAfterEnd, KeepAfterEndDefault)
	if opts.IsRoomMissing == nil {
		opts.IsRoomMissing = func(error) bool { return false }
	}
	return &Service{store: store, gate: gate, tickets: tickets, vouchers: vouchers, log: log, opts: opts, rooms: map[int64]domain.Seckill{}}
}

// settings are what Redis holds of a voucher's room.
func (s *Service) settings(sk domain.Seckill) domain.RoomSettings {
	room := sk.Room.WithDefaults()
	paused := room.Paused
	return domain.RoomSettings{
		Open: sk.BeginAt.Add(-s.opts.ReleaseBefore), End: sk.EndAt,
		Rate: room.AdmitPerSecond, Max: room.MaxActive, Paused: &paused,
		Expire: sk.EndAt.Add(s.opts.KeepAfterEnd),
	}
}

// Join puts the caller in the voucher's line, once, and returns their
// place: the same place when they joined before.
func (s *Service) Join(ctx context.Context, user int64, ip string, voucher int64, challenge, nonce string) (domain.QueuePlace, error) {
	sk, err := s.gate.Join(ctx, user, ip, voucher, challenge, nonce)
	if err != nil {
		return domain.QueuePlace{}, err
	}
	s.pace(voucher, sk)
	joined, reset, err := s.store.Join(ctx, voucher, user)
	if s.opts.IsRoomMissing(err) {
		// Never configured in this Redis, or lost with the voucher's load.
		if err = s.store.Configure(ctx, voucher, s.settings(sk)); err == nil {
			joined, reset, err = s.store.Join(ctx, voucher, user)
		}
	}
	if err != nil {
		return domain.QueuePlace{}, unavailable(err)
	}
	if reset {
		s.emptied(voucher)
	}
	if joined {
		joins.Inc()
	}
	p, ok, err := s.Place(ctx, user, voucher)
	switch {
	case err != nil:
		return domain.QueuePlace{}, err
	case !ok:
		// Joined, and gone at once: Redis lost it between the two calls.
		return domain.QueuePlace{}, domain.Errorf(domain.CodeUnavailable, "the waiting room was lost while you joined; join again")
	}
	return p, nil
}

// Place is the caller's place in the voucher's line; ok is false when
// they have none (never joined, or the room's state was lost with
// Redis's: join again).
func (s *Service) Place(ctx context.Context, user, voucher int64) (domain.QueuePlace, bool, error) {
	v, err := s.store.Place(ctx, voucher, user)
	if err != nil {
		return domain.QueuePlace{}, false, unavailable(err)
	}
	p, ok := s.placeOf(user, voucher, v)
	return p, ok, nil
}

// emptied records a room whose line a join or an admission emptied: its
// state was written on another Redis process.
func (s *Service) emptied(voucher int64) {
	roomResets.Inc()
	s.log.Warn("waiting room held places written on another redis process; its line was emptied", "voucher", voucher)
}

// SetWaitingRoom changes a room's pace, open tickets or pause, in the
// database and then in Redis; the next admission follows.
func (s *Service) SetWaitingRoom(ctx context.Context, voucher int64, change domain.RoomChange) (domain.Voucher, error) {
	if err := change.Validate(); err != nil {
		return domain.Voucher{}, err
	}
	v, err := s.vouchers.SetWaitingRoom(ctx, voucher, change)
	if err != nil {
		return domain.Voucher{}, err
	}
	if v.Seckill != nil {
		s.pace(voucher, *v.Seckill)
		if err := s.store.Configure(ctx, voucher, s.settings(*v.Seckill)); err != nil {
			// The database holds the change; the pacer writes it to Redis
			// at its next refresh.
			s.log.WarnContext(ctx, "waiting room settings not written to redis; the pacer writes them at its next refresh", "voucher", voucher, "err", err)
		}
	}
	return v, nil
}

// pace adds a room to those this node's pacer runs.
func (s *Service) pace(voucher int64, sk domain.Seckill) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rooms[voucher] = sk
}

// unavailable is a store failure as the caller hears it: a client error
// as it is, anything else UNAVAILABLE.
func unavailable(err error) error {
	var de *domain.Error
	if errors.As(err, &de) {
		return err
	}
	return &domain.Error{Code: domain.CodeUnavailable, Message: "the waiting room is unavailable; retry later"}
}
