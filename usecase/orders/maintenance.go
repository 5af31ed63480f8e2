package orders

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"flashsale/internal/maintenance"
)

// Maintenance defaults.
const (
	TimeoutIntervalDefault = time.Second
	TimeoutBatchDefault    = 500
	SweepIntervalDefault   = 5 * time.Second
	// SweepGraceDefault leaves a fresh pending change to the request that
	// made it, which applies it right after its commit.
	SweepGraceDefault = 5 * time.Second
	SweepBatchDefault = 500
)

// TimeoutConfig tunes the pay-timeout cancellation.
type TimeoutConfig struct {
	PayTimeout time.Duration
	Interval   time.Duration
	Batch      int
}

// Timeouts cancels unpaid orders past their pay deadline, on one node at a
// time (lease "pay-timeout"). The payment racing it is decided by the
// conditional update in the database: whichever commits first wins, and
// the other is told so.
type Timeouts struct {
	// Job runs RunOnce every interval under the lease (Start, Stop).
	*maintenance.Job[int]
	cfg   TimeoutConfig
	store Storer
	log   *slog.Logger
	now   func() time.Time
}

// NewTimeouts returns the pay-timeout job.
func NewTimeouts(store Storer, locker maintenance.Locker, cfg TimeoutConfig, log *slog.Logger) *Timeouts {
	cfg.PayTimeout = cmp.Or(cfg.PayTimeout, PayTimeoutDefault)
	cfg.Interval = cmp.Or(cfg.Interval, TimeoutIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, TimeoutBatchDefault)
	t := &Timeouts{cfg: cfg, store: store, log: log, now: time.Now}
	t.Job = maintenance.New(maintenance.Config{Name: "pay-timeout", Interval: cfg.Interval, Locker: locker}, log, t.RunOnce)
	return t
}

// RunOnce cancels due orders batch by batch until none is left or ctx
// ends (the lease lost), and returns how many it cancelled.
func (t *Timeouts) RunOnce(ctx context.Context) (int, error) {
	total := 0
	for ctx.Err() == nil {
		now := t.now()
		n, err := t.store.CancelDue(ctx, now.Add(-t.cfg.PayTimeout), t.cfg.Batch, now)
		total += n
		if err != nil {
			return total, err
		}
		if n == 0 {
			break
		}
	}
	if total > 0 {
		t.log.InfoContext(ctx, "unpaid orders cancelled after the pay timeout", "orders", total)
	}
	return total, ctx.Err()
}

// SweepConfig tunes the pending-stock sweeper.
type SweepConfig struct {
	Interval time.Duration
	Grace    time.Duration
	Batch    int
}

// Sweeper applies to Redis the stock changes (returned orders, restocks)
// that were committed in the database but not applied, because the node
// that made them crashed or lost Redis in between (lease "stock-sweep").
type Sweeper struct {
	// Job runs RunOnce every interval under the lease (Start, Stop).
	*maintenance.Job[int]
	cfg   SweepConfig
	store Storer
	log   *slog.Logger
	now   func() time.Time
}

// NewSweeper returns the sweeper job.
func NewSweeper(store Storer, locker maintenance.Locker, cfg SweepConfig, log *slog.Logger) *Sweeper {
	cfg.Interval = cmp.Or(cfg.Interval, SweepIntervalDefault)
	cfg.Grace = cmp.Or(cfg.Grace, SweepGraceDefault)
	cfg.Batch = cmp.Or(cfg.Batch, SweepBatchDefault)
	s := &Sweeper{cfg: cfg, store: store, log: log, now: time.Now}
	s.Job = maintenance.New(maintenance.Config{Name: "stock-sweep", Interval: cfg.Interval, Locker: locker}, log, s.RunOnce)
	return s
}

// RunOnce applies the pending changes older than the grace, and returns
// how many it handled.
func (s *Sweeper) RunOnce(ctx context.Context) (int, error) {
	n, err := s.store.ApplyPending(ctx, s.now().Add(-s.cfg.Grace), s.cfg.Batch)
	if n > 0 {
		s.log.WarnContext(ctx, "stock changes left unapplied in redis were applied", "changes", n)
	}
	return n, err
}
