package orders

import (
	"cmp"
	"context"
	"log/slog"
	"time"
)

// Locker runs work under a cluster-wide lease (lease.Redlock): ran is
// false when another node holds it.
type Locker interface {
	Do(ctx context.Context, name string, fn func(ctx context.Context) error) (ran bool, err error)
}

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

// every runs once every interval until ctx ends, under the named lease.
// It is the one lifecycle of the maintenance services: Start launches it,
// the returned channel closes when it has stopped.
func every(ctx context.Context, interval time.Duration, locker Locker, name string, log *slog.Logger, once func(ctx context.Context) error) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if _, err := locker.Do(ctx, name, once); err != nil && ctx.Err() == nil {
				log.WarnContext(ctx, "maintenance run failed; next tick retries", "job", name, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}

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
	cfg    TimeoutConfig
	store  Storer
	locker Locker
	log    *slog.Logger
	now    func() time.Time
}

// NewTimeouts returns the pay-timeout service.
func NewTimeouts(store Storer, locker Locker, cfg TimeoutConfig, log *slog.Logger) *Timeouts {
	cfg.PayTimeout = cmp.Or(cfg.PayTimeout, PayTimeoutDefault)
	cfg.Interval = cmp.Or(cfg.Interval, TimeoutIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, TimeoutBatchDefault)
	return &Timeouts{cfg: cfg, store: store, locker: locker, log: log, now: time.Now}
}

// Start runs the service until ctx ends; the channel closes then.
func (t *Timeouts) Start(ctx context.Context) <-chan struct{} {
	return every(ctx, t.cfg.Interval, t.locker, "pay-timeout", t.log, func(ctx context.Context) error {
		_, err := t.runOnce(ctx)
		return err
	})
}

// runOnce cancels due orders batch by batch until none is left or ctx
// ends (the lease lost), and returns how many it cancelled.
func (t *Timeouts) runOnce(ctx context.Context) (int, error) {
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
	cfg    SweepConfig
	store  Storer
	locker Locker
	log    *slog.Logger
	now    func() time.Time
}

// NewSweeper returns the sweeper.
func NewSweeper(store Storer, locker Locker, cfg SweepConfig, log *slog.Logger) *Sweeper {
	cfg.Interval = cmp.Or(cfg.Interval, SweepIntervalDefault)
	cfg.Grace = cmp.Or(cfg.Grace, SweepGraceDefault)
	cfg.Batch = cmp.Or(cfg.Batch, SweepBatchDefault)
	return &Sweeper{cfg: cfg, store: store, locker: locker, log: log, now: time.Now}
}

// Start runs the sweeper until ctx ends; the channel closes then.
func (s *Sweeper) Start(ctx context.Context) <-chan struct{} {
	return every(ctx, s.cfg.Interval, s.locker, "stock-sweep", s.log, func(ctx context.Context) error {
		_, err := s.runOnce(ctx)
		return err
	})
}

// runOnce applies the pending changes older than the grace, and returns
// how many it handled.
func (s *Sweeper) runOnce(ctx context.Context) (int, error) {
	n, err := s.store.ApplyPending(ctx, s.now().Add(-s.cfg.Grace), s.cfg.Batch)
	if n > 0 {
		s.log.WarnContext(ctx, "stock changes left unapplied in redis were applied", "changes", n)
	}
	return n, err
}

// Every is the maintenance services' lifecycle for services of other
// packages (red-packet refunds): once runs every interval under the named
// lease until ctx ends; the channel closes when it has stopped.
func Every(ctx context.Context, interval time.Duration, locker Locker, name string, log *slog.Logger, once func(ctx context.Context) error) <-chan struct{} {
	return every(ctx, interval, locker, name, log, once)
}
