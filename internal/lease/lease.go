// Package lease holds leases: one type, Lease, whatever backend keeps
// it, renewed by one loop (Keeper, from Lease.Keeper). Three backends take one:
//
//   - Redlock (go-redsync over the LOCK_REDIS_URLS nodes): cluster-wide
//     singleton work (the pay-timeout cancellation, the pending-stock
//     sweeper, reconciliation, the order-log reclaim) and segment
//     ownership. Do extends it at a third of its TTL, like Redisson's
//     watchdog, and cancels the work's context when an extension fails. A
//     lapsed lease is harmless by design: every change the work makes is
//     conditional (an UPDATE ... WHERE status = 1, an idempotent Redis
//     script), so two nodes overlapping for a moment change nothing twice;
//     the lease only saves the duplicate effort.
//   - a log writer's consumer name (TakeName over a Named store, a Redis
//     key): two running processes must not read the logs under one name.
//   - the order-id slot (a tb_order_id_node row): its claim renews the
//     slot's reservation of seconds with the lease.
//
// Each backend's store does one round trip per call; the goroutines that
// renew leases are here, never in the store.
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
	key func(name string) string
	ttl time.Duration
	log *slog.Logger
}

// New returns leases over the lock Redis nodes, each kept under the key
// key(name) (persistence.LeaseKey: the storage owns its key names); ttl 0
// takes TTLDefault.
func New(nodes []redis.UniversalClient, key func(name string) string, ttl time.Duration, log *slog.Logger) *Redlock {
	pools := make([]redsyncredis.Pool, len(nodes))
	for i, n := range nodes {
		pools[i] = goredis.NewPool(n)
	}
	return &Redlock{rs: redsync.New(pools...), key: key, ttl: cmp.Or(ttl, TTLDefault), log: log}
}

// nodeTimeout is the least a take waits for each lock node: redsync's own
// bound is 5 % of the TTL, 15 ms for a 300 ms lease, which a busy machine
// exceeds without anything being wrong.
const nodeTimeout = 100 * time.Millisecond

// timeoutFactor is redsync's per-node timeout as a share of ttl: 5 %, or
// nodeTimeout when that is more, and never more than a third of the TTL.
func timeoutFactor(ttl time.Duration) float64 {
	return min(max(0.05, float64(nodeTimeout)/float64(ttl)), 1.0/3)
}

// Do runs fn if it can take the lease name at once (ran = false when
// another node holds it), extends the lease every TTL/3 while fn runs, and
// releases it when fn returns. If an extension fails, fn's context is
// cancelled: another node may hold the lease from then on.
func (l *Redlock) Do(ctx context.Context, name string, fn func(ctx context.Context) error) (ran bool, err error) {
	m := l.rs.NewMutex(l.key(name), redsync.WithExpiry(l.ttl), redsync.WithTries(1),
		redsync.WithTimeoutFactor(timeoutFactor(l.ttl)))
	if err := m.TryLockContext(ctx); err != nil {
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			return false, nil
		}
		return false, fmt.Errorf("take lease %s: %w", name, err)
	}
	h := Held(name, l.ttl, redlockClaim{m})
	work, cancel := context.WithCancel(ctx)
	keeper := h.Keeper(KeepOptions{Every: l.ttl / 3, Timeout: l.ttl, OnError: func(err error) {
		l.log.WarnContext(ctx, "lease lost; stopping its work", "lease", name, "err", err)
		cancel()
	}, GiveUp: true})
	_ = keeper.Start(work)
	err = fn(work)
	keeper.Stop()
	cancel()
	return true, err
}

// Acquire takes the named lease with the given TTL (0: the Redlock's),
// trying every 50 ms until ctx ends: a member waits for another to
// release it, or for it to lapse when its holder died.
func (l *Redlock) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	ttl = cmp.Or(ttl, l.ttl)
	m := l.rs.NewMutex(l.key(name), redsync.WithExpiry(ttl),
		redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(50*time.Millisecond),
		redsync.WithTimeoutFactor(timeoutFactor(ttl)))
	if err := m.LockContext(ctx); err != nil {
		return nil, fmt.Errorf("take lease %s: %w", name, err)
	}
	return Held(m.Name(), ttl, redlockClaim{m}), nil
}

// Resume takes back the named lease that this process held under value
// and whose renewals failed (Redis was away, failed over or restarted):
// it extends it if Redis still holds value, so the holder's successor in
// this process serves again at once rather than waiting for its own old
// lease to lapse. It fails with ErrLost when the lease lapsed or another
// holder has it, with another error when Redis could not be asked.
func (l *Redlock) Resume(ctx context.Context, name string, ttl time.Duration, value string) (*Lease, error) {
	ttl = cmp.Or(ttl, l.ttl)
	m := l.rs.NewMutex(l.key(name), redsync.WithExpiry(ttl), redsync.WithValue(value),
		redsync.WithTimeoutFactor(timeoutFactor(ttl)))
	ok, err := m.ExtendContext(ctx)
	var taken *redsync.ErrTaken
	switch {
	case errors.As(err, &taken):
		return nil, fmt.Errorf("take back lease %s: %w: %w", name, ErrLost, err)
	case !ok:
		return nil, fmt.Errorf("take back lease %s: %w", name, cmp.Or(err, ErrLost))
	}
	return Held(m.Name(), ttl, redlockClaim{m}), nil
}

// redlockClaim is a Redlock mutex as a lease's claim.
type redlockClaim struct{ m *redsync.Mutex }

func (c redlockClaim) Renew(ctx context.Context) error {
	ok, err := c.m.ExtendContext(ctx)
	var taken *redsync.ErrTaken
	if errors.As(err, &taken) {
		return fmt.Errorf("%w: %w", ErrLost, err) // another holder has it
	}
	if err != nil {
		return err
	}
	if !ok {
		return ErrLost
	}
	return nil
}

// Value is the mutex's value: what Resume takes the lease back by.
func (c redlockClaim) Value() string { return c.m.Value() }

// Release lets the mutex go (a lapsed one is simply gone).
func (c redlockClaim) Release(ctx context.Context) error {
	_, _ = c.m.UnlockContext(ctx)
	return nil
}
