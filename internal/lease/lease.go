// Package lease runs cluster-wide singleton work under a Redlock lease
// (go-redsync over the LOCK_REDIS_URLS nodes): the pay-timeout
// cancellation, the pending-stock sweeper and reconciliation run on one
// node at a time. A lease is extended at a third of its TTL, like
// Redisson's watchdog; when an extension fails the work's context is
// cancelled. A lapsed lease is harmless by design: every change the work
// makes is conditional (an UPDATE ... WHERE status = 1, an idempotent
// Redis script), so two nodes overlapping for a moment change nothing
// twice; the lease only saves the duplicate effort.
package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// TTLDefault is how long a lease lasts without an extension.
const TTLDefault = 10 * time.Second

// Redlock hands out named leases over independent Redis nodes (1, 3 or 5).
type Redlock struct {
	rs  *redsync.Redsync
	ttl time.Duration
	log *slog.Logger
}

// New returns leases over the lock Redis nodes; ttl 0 takes TTLDefault.
func New(nodes []redis.UniversalClient, ttl time.Duration, log *slog.Logger) *Redlock {
	pools := make([]redsyncredis.Pool, len(nodes))
	for i, n := range nodes {
		pools[i] = goredis.NewPool(n)
	}
	return &Redlock{rs: redsync.New(pools...), ttl: cmp.Or(ttl, TTLDefault), log: log}
}

// Do runs fn if it can take the lease name at once (ran = false when
// another node holds it), extends the lease every TTL/3 while fn runs, and
// releases it when fn returns. If an extension fails, fn's context is
// cancelled: another node may hold the lease from then on.
func (l *Redlock) Do(ctx context.Context, name string, fn func(ctx context.Context) error) (ran bool, err error) {
	m := l.rs.NewMutex("flashsale:lease:"+name, redsync.WithExpiry(l.ttl), redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			return false, nil
		}
		return false, fmt.Errorf("take lease %s: %w", name, err)
	}
	work, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	watchdog := make(chan struct{})
	go func() {
		defer close(watchdog)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if ok, err := m.ExtendContext(work); !ok || err != nil {
					l.log.WarnContext(ctx, "lease lost; stopping its work", "lease", name, "err", err)
					cancel()
					return
				}
			}
		}
	}()
	err = fn(work)
	close(done)
	<-watchdog
	cancel()
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	_, _ = m.UnlockContext(uctx) // a lease that lapsed is simply gone
	ucancel()
	return true, err
}

// ErrLost is returned by Extend when the lease is no longer ours.
var ErrLost = errors.New("lease lost")

// Held is a lease its holder renews itself (a segment activation renews
// from its own timer, see actors.Leases).
type Held struct {
	m   *redsync.Mutex
	ttl time.Duration
}

// Acquire takes the named lease with the given TTL (0: the Redlock's),
// trying every 50 ms until ctx ends: a member waits for another to
// release it, or for it to lapse when its holder died.
func (l *Redlock) Acquire(ctx context.Context, name string, ttl time.Duration) (*Held, error) {
	ttl = cmp.Or(ttl, l.ttl)
	m := l.rs.NewMutex("flashsale:lease:"+name, redsync.WithExpiry(ttl),
		redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(50*time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		return nil, fmt.Errorf("take lease %s: %w", name, err)
	}
	return &Held{m: m, ttl: ttl}, nil
}

// Extend renews the lease for another TTL.
func (h *Held) Extend(ctx context.Context) error {
	ok, err := h.m.ExtendContext(ctx)
	if err != nil {
		return fmt.Errorf("extend lease %s: %w", h.m.Name(), err)
	}
	if !ok {
		return fmt.Errorf("extend lease %s: %w", h.m.Name(), ErrLost)
	}
	return nil
}

// Release lets the lease go (a lapsed lease is simply gone).
func (h *Held) Release(ctx context.Context) { _, _ = h.m.UnlockContext(ctx) }

// TTL is how long the lease lasts without an extension.
func (h *Held) TTL() time.Duration { return h.ttl }
