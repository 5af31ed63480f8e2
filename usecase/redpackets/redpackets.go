// Package redpackets is the red-packet use case: creating a red
// packet (split up front, committed, then pushed into Redis), grabbing a
// packet (through the router's red-packet sequencer), reading one,
// refunding what nobody grabbed once it expires, and pruning the settled
// ones after a retention, each job on one node at a time.
package redpackets

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"flashsale/domain"
	"flashsale/internal/maintenance"
)

// Storer keeps red packets (persistence.RedPacketStore).
type Storer interface {
	// CreateWithin commits the red packet and its packets, then loads it
	// into Redis; unless its creator has reached a bound of the quota
	// (q.MaxOpen open red packets: not refunded, and not fully grabbed in
	// the database; q.MaxPerDay created within domain.RedPacketDay before
	// rp.CreatedAt): then it stores nothing and says which. The counts and
	// the commit hold the creator's lock: two creates at a limit never
	// both pass.
	CreateWithin(ctx context.Context, rp domain.RedPacket, amounts []int64, q domain.RedPacketQuota) (*domain.RedPacketOverQuota, error)
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

// Config tunes the service.
type Config struct {
	// MaxOpenPerUser is how many open red packets one user may have at
	// once (MaxOpenPerUserDefault when 0). Open: neither refunded nor
	// fully grabbed. It bounds what one user locks up: at most this many
	// times domain.RedPacketMaxCount packets nobody has taken, in Redis
	// and in cents.
	MaxOpenPerUser int
	// MaxPerUserPerDay is how many red packets one user may create within
	// any 24 hours (MaxPerUserPerDayDefault when 0). The open count alone
	// can be cycled: a red packet of one second is refunded, and frees
	// its slot, a few seconds later, and each leaves its rows in the
	// database until it is pruned (Pruning).
	MaxPerUserPerDay int
	// RefundLag is how long after its expiry a red packet is refunded at
	// the latest (the refunds' Grace plus their Interval): when an expired
	// red packet frees its creator's slot. It only shapes the answer to a
	// create over the quota (RefundGraceDefault + RefundIntervalDefault
	// when 0).
	RefundLag time.Duration
}

// Defaults of the quota per user.
const (
	MaxOpenPerUserDefault   = 10
	MaxPerUserPerDayDefault = 50
)

// Service is the red-packet use case.
type Service struct {
	cfg     Config
	store   Storer
	ids     IDs
	grabber Grabber
	now     func() time.Time
}

// New returns the service.
func New(store Storer, ids IDs, grabber Grabber, cfg Config) *Service {
	cfg.MaxOpenPerUser = cmp.Or(cfg.MaxOpenPerUser, MaxOpenPerUserDefault)
	cfg.MaxPerUserPerDay = cmp.Or(cfg.MaxPerUserPerDay, MaxPerUserPerDayDefault)
	cfg.RefundLag = cmp.Or(cfg.RefundLag, RefundGraceDefault+RefundIntervalDefault)
	return &Service{cfg: cfg, store: store, ids: ids, grabber: grabber, now: time.Now}
}

// Create checks the request, splits the sum (domain.SplitRedPacket) and
// stores the red packet; its packets are in Redis when it returns. A
// creator with MaxOpenPerUser open red packets, or MaxPerUserPerDay
// created within the last 24 hours, gets a RATE_LIMITED error (overQuota)
// and nothing is stored.
//
// The service moves no money: it records who created how many cents, who
// grabbed which packet and what was refunded (tb_red_packet,
// tb_red_packet_grab, tb_red_packet.refund_*), and the platform that
// calls it debits the creator and credits the grabbers and the refunds
// from those records.
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
	over, err := s.store.CreateWithin(ctx, rp, amounts, domain.RedPacketQuota{MaxOpen: s.cfg.MaxOpenPerUser, MaxPerDay: s.cfg.MaxPerUserPerDay})
	if err != nil {
		return domain.RedPacket{}, err
	}
	if over != nil {
		return domain.RedPacket{}, s.overQuota(*over, now)
	}
	return rp, nil
}

// overQuota is the answer to a create over the quota: RATE_LIMITED, as
// the contract has it for "not now, later" (the request is valid, and the
// same request passes once a slot frees), retryAfterMs until the latest
// moment the create passes for sure (the earliest expiry's refund, the
// day's oldest create leaving the window; the later of the two when both
// bounds are reached), and a message that names the bound that frees
// last, the limit, and what frees it.
func (s *Service) overQuota(over domain.RedPacketOverQuota, now time.Time) *domain.Error {
	var freed time.Time
	var msg string
	if len(over.Open) > 0 {
		freed = over.Open[0].Add(s.cfg.RefundLag)
		msg = fmt.Sprintf("you have %d open red packets, the limit per user is %d: "+
			"one frees up once it is fully grabbed, or at the latest when the earliest expires (%s) and its rest is refunded to you",
			len(over.Open), s.cfg.MaxOpenPerUser, over.Open[0].UTC().Format(time.RFC3339))
	}
	if !over.DayFreesAt.IsZero() && over.DayFreesAt.After(freed) {
		freed = over.DayFreesAt
		msg = fmt.Sprintf("you created %d red packets in the last 24 hours, the limit per user is %d a day: "+
			"the next one can be created at %s", s.cfg.MaxPerUserPerDay, s.cfg.MaxPerUserPerDay, over.DayFreesAt.UTC().Format(time.RFC3339))
	}
	return &domain.Error{Code: domain.CodeRateLimited, Message: msg, RetryAfter: max(freed.Sub(now), time.Millisecond)}
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
	// Job runs RunOnce every interval under the lease (Start, Stop).
	*maintenance.Job[int]
	cfg   RefundConfig
	store Storer
	log   *slog.Logger
	now   func() time.Time
}

// NewRefunds returns the refund job.
func NewRefunds(store Storer, locker maintenance.Locker, cfg RefundConfig, log *slog.Logger) *Refunds {
	cfg.Interval = cmp.Or(cfg.Interval, RefundIntervalDefault)
	cfg.Grace = cmp.Or(cfg.Grace, RefundGraceDefault)
	cfg.Batch = cmp.Or(cfg.Batch, RefundBatchDefault)
	r := &Refunds{cfg: cfg, store: store, log: log, now: time.Now}
	r.Job = maintenance.New(maintenance.Config{Name: "red-packet-refund", Interval: cfg.Interval, Locker: locker}, log, r.RunOnce)
	return r
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
		switch {
		case refunded && cents > 0:
			n++
			r.log.InfoContext(ctx, "red packet refunded", "red_packet", id, "cents", cents)
		case refunded: // every packet was grabbed: settled, nothing paid back
			n++
			r.log.DebugContext(ctx, "red packet settled with nothing to refund", "red_packet", id)
		}
	}
	return n, nil
}

// Pruner deletes settled red packets (persistence.RedPacketStore).
type Pruner interface {
	// PruneSettled deletes, in one transaction, red packets refunded
	// before cutoff with every row of theirs, the earliest refunded
	// first, whole red packets until their packets reach maxPackets (at
	// least one); it returns how many it deleted, 0 when none is due.
	PruneSettled(ctx context.Context, cutoff time.Time, maxPackets int) (int, error)
}

// PruneConfig tunes the pruning of settled red packets.
type PruneConfig struct {
	// Retention is how long a red packet is kept after it settled (its
	// refund, which every red packet gets once it expired and no grab of
	// it can still arrive): RetentionDefault when 0, and never less than
	// domain.RedPacketDay, whose creations the daily quota counts.
	Retention time.Duration
	// Interval is how often the pruning runs (PruneIntervalDefault when 0).
	Interval time.Duration
	// BatchPackets bounds one transaction by the packets of the red
	// packets it deletes (PruneBatchPacketsDefault when 0); Batches the
	// transactions of one run (PruneBatchesDefault when 0), the rest
	// waiting for the next run.
	BatchPackets int
	Batches      int
}

// Pruning defaults: a month of history, and at most a million packets'
// rows deleted a minute, ten thousand a transaction.
const (
	RetentionDefault         = 30 * 24 * time.Hour
	PruneIntervalDefault     = time.Minute
	PruneBatchPacketsDefault = 10_000
	PruneBatchesDefault      = 100
)

// Pruning deletes settled red packets past their retention from the
// database, with their packets and grabs, on one node at a time (lease
// "red-packet-prune"). Without it every red packet's rows stay for good:
// a packet row per packet and a grab row per grab, 409 KB of Postgres for
// a red packet of 5,000 packets (docs/BENCHMARKS.md).
type Pruning struct {
	// Job runs RunOnce every interval under the lease (Start, Stop).
	*maintenance.Job[int]
	cfg   PruneConfig
	store Pruner
	log   *slog.Logger
	now   func() time.Time
}

// NewPruning returns the pruning job.
func NewPruning(store Pruner, locker maintenance.Locker, cfg PruneConfig, log *slog.Logger) *Pruning {
	cfg.Retention = max(cmp.Or(cfg.Retention, RetentionDefault), domain.RedPacketDay)
	cfg.Interval = cmp.Or(cfg.Interval, PruneIntervalDefault)
	cfg.BatchPackets = cmp.Or(cfg.BatchPackets, PruneBatchPacketsDefault)
	cfg.Batches = cmp.Or(cfg.Batches, PruneBatchesDefault)
	p := &Pruning{cfg: cfg, store: store, log: log, now: time.Now}
	p.Job = maintenance.New(maintenance.Config{Name: "red-packet-prune", Interval: cfg.Interval, Locker: locker, FirstAfterInterval: true}, log, p.RunOnce)
	return p
}

// RunOnce deletes the red packets settled before the retention, a batch
// per transaction, until none is left or Batches are done, and returns
// how many it deleted.
func (p *Pruning) RunOnce(ctx context.Context) (int, error) {
	cutoff := p.now().Add(-p.cfg.Retention)
	total := 0
	for range p.cfg.Batches {
		n, err := p.store.PruneSettled(ctx, cutoff, p.cfg.BatchPackets)
		total += n
		if err != nil || n == 0 {
			p.logPruned(ctx, total, cutoff)
			return total, err
		}
	}
	p.logPruned(ctx, total, cutoff)
	return total, nil
}

func (p *Pruning) logPruned(ctx context.Context, n int, cutoff time.Time) {
	if n > 0 {
		p.log.InfoContext(ctx, "settled red packets pruned", "red_packets", n, "refunded_before", cutoff.UTC().Format(time.RFC3339))
	}
}
