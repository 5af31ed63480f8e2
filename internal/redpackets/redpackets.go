// Package redpackets is the red-packet use case: creating a red
// packet (split up front, committed, then pushed into Redis), grabbing a
// packet (through the router's red-packet sequencer), reading one, and
// refunding what nobody grabbed once it expires, on one node at a time.
package redpackets

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"flashsale/domain"
	"flashsale/internal/orders"
)

// Storer keeps red packets (persistence.RedPacketStore).
type Storer interface {
	// Create commits the red packet and its packets, then loads it into
	// Redis.
	Create(ctx context.Context, rp domain.RedPacket, amounts []int64) error
	Get(ctx context.Context, id int64) (domain.RedPacket, error)
	// Due lists red packets expired before cutoff and not refunded.
	Due(ctx context.Context, cutoff time.Time, limit int) ([]int64, error)
	// Refund refunds one expired red packet once, when no grab of it can
	// still reach the database; done is false until then (a grab in its
	// order log, a writer holding grabs of it, a hold after Redis lost
	// it), refunded is true for the one call that recorded the refund.
	Refund(ctx context.Context, id int64, now time.Time) (done, refunded bool, cents int64, err error)
}

// IDs hands out unique ids (persistence.OrderIDs: red packets take theirs
// from the same 64-bit, time-ordered sequence as orders).
type IDs interface {
	Take(ctx context.Context, n int) ([]int64, error)
}

// Grabber grabs a packet for a user (actors.RedPackets).
type Grabber interface {
	Grab(ctx context.Context, id, userID int64, requestID string) domain.RedPacketResult
}

// Service is the red-packet use case.
type Service struct {
	store   Storer
	ids     IDs
	grabber Grabber
	now     func() time.Time
}

// New returns the service.
func New(store Storer, ids IDs, grabber Grabber) *Service {
	return &Service{store: store, ids: ids, grabber: grabber, now: time.Now}
}

// Create checks the request, splits the sum (domain.SplitRedPacket) and
// stores the red packet; its packets are in Redis when it returns.
func (s *Service) Create(ctx context.Context, in domain.NewRedPacket) (domain.RedPacket, error) {
	if err := in.Check(); err != nil {
		return domain.RedPacket{}, err
	}
	ids, err := s.ids.Take(ctx, 1)
	if err != nil {
		return domain.RedPacket{}, err
	}
	now := s.now().Truncate(time.Millisecond)
	rp := domain.RedPacket{ID: ids[0], CreatorID: in.CreatorID, TotalCents: in.TotalCents, Count: in.Count,
		RemainingCount: in.Count, RemainingCents: in.TotalCents, ExpiresAt: now.Add(in.Expiry), CreatedAt: now}
	amounts := domain.SplitRedPacket(in.TotalCents, in.Count, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	if err := s.store.Create(ctx, rp, amounts); err != nil {
		return domain.RedPacket{}, err
	}
	return rp, nil
}

// Get reads a red packet with its live remaining packets and cents.
func (s *Service) Get(ctx context.Context, id int64) (domain.RedPacket, error) {
	return s.store.Get(ctx, id)
}

// Grab grabs one packet for the user; outcomes are codes, never errors.
func (s *Service) Grab(ctx context.Context, id, userID int64, requestID string) domain.RedPacketResult {
	return s.grabber.Grab(ctx, id, userID, requestID)
}

// RefundConfig tunes the refunds.
type RefundConfig struct {
	// Interval is how often expired red packets are looked for.
	Interval time.Duration
	// Grace is how long after its expiry a red packet is refunded: room
	// for the clocks of Redis and this node to differ. (Redis's clock
	// decides in the end: see persistence.RedPacketStore.Refund.)
	Grace time.Duration
	Batch int
}

// Refund defaults.
const (
	RefundIntervalDefault = time.Second
	RefundGraceDefault    = time.Second
	RefundBatchDefault    = 100
)

// Refunds refunds expired red packets to their creators, on one node at a
// time (lease "red-packet-refund"); the conditional update in the
// database makes a second run, on any node, a no-op.
type Refunds struct {
	cfg    RefundConfig
	store  Storer
	locker orders.Locker
	log    *slog.Logger
	now    func() time.Time
}

// NewRefunds returns the refund service.
func NewRefunds(store Storer, locker orders.Locker, cfg RefundConfig, log *slog.Logger) *Refunds {
	cfg.Interval = cmp.Or(cfg.Interval, RefundIntervalDefault)
	cfg.Grace = cmp.Or(cfg.Grace, RefundGraceDefault)
	cfg.Batch = cmp.Or(cfg.Batch, RefundBatchDefault)
	return &Refunds{cfg: cfg, store: store, locker: locker, log: log, now: time.Now}
}

// Start runs the refunds until ctx ends; the channel closes then.
func (r *Refunds) Start(ctx context.Context) <-chan struct{} {
	return orders.Every(ctx, r.cfg.Interval, r.locker, "red-packet-refund", r.log, func(ctx context.Context) error {
		_, err := r.RunOnce(ctx)
		return err
	})
}

// RunOnce refunds the red packets due now and returns how many this run
// refunded (those whose grabs may still arrive wait for a later run).
func (r *Refunds) RunOnce(ctx context.Context) (int, error) {
	ids, err := r.store.Due(ctx, r.now().Add(-r.cfg.Grace), r.cfg.Batch)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		_, refunded, cents, err := r.store.Refund(ctx, id, r.now())
		if err != nil {
			return n, err
		}
		if refunded {
			n++
			r.log.InfoContext(ctx, "red packet refunded", "red_packet", id, "cents", cents)
		}
	}
	return n, nil
}
