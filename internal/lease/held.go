package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"flashsale/internal/lifecycle"
)

// ErrLost says a lease is no longer ours: another holder took it, or it
// lapsed and could not be taken again.
var ErrLost = errors.New("lease lost")

// Claim is a backend's hold on one lease: a Redlock mutex, a consumer
// name's key, an order-id slot's row. Each call is one round trip.
type Claim interface {
	// Renew extends the lease for another TTL; an error wrapping ErrLost
	// says another holder has it, any other that the backend could not be
	// reached (the lease may still be ours).
	Renew(ctx context.Context) error
	// Release lets the lease go, so another holder may take it at once.
	Release(ctx context.Context) error
}

// Lease is one held lease, whatever its backend.
type Lease struct {
	name  string
	ttl   time.Duration
	claim Claim
}

// Held returns the lease name held through claim; ttl is how long it
// lasts without a renewal.
func Held(name string, ttl time.Duration, claim Claim) *Lease {
	return &Lease{name: name, ttl: ttl, claim: claim}
}

// Name names the lease, for log messages.
func (l *Lease) Name() string { return l.name }

// TTL is how long the lease lasts without an extension.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Extend renews the lease for another TTL.
func (l *Lease) Extend(ctx context.Context) error {
	if err := l.claim.Renew(ctx); err != nil {
		return fmt.Errorf("extend lease %s: %w", l.name, err)
	}
	return nil
}

// Release lets the lease go (a lapsed lease is simply gone).
func (l *Lease) Release(ctx context.Context) { _ = l.claim.Release(ctx) }

// Value is what the lease is held under, for a backend that can take a
// lease back by it (Redlock.Resume); "" otherwise.
func (l *Lease) Value() string {
	if v, ok := l.claim.(interface{ Value() string }); ok {
		return v.Value()
	}
	return ""
}

// KeepOptions says how a Keeper renews a lease.
type KeepOptions struct {
	// Every is the time between renewals; TTL/3 when zero.
	Every time.Duration
	// Retry is the time before the next renewal after a failed one;
	// Every when zero.
	Retry time.Duration
	// Timeout bounds one renewal; Every when zero.
	Timeout time.Duration
	// Wake, if set, asks for a renewal at once (the order-id slot ran
	// out of reserved seconds).
	Wake <-chan struct{}
	// OnError, if set, hears of each failed renewal.
	OnError func(error)
	// GiveUp stops renewing after the first failure (the Redlock
	// watchdog: the work stops); otherwise the Keeper goes on, after Retry.
	GiveUp bool
	// Keep, if set, leaves the lease held at Stop (it lapses after its
	// TTL) instead of releasing it.
	Keep bool
}

// Keeper renews a lease in a loop of its own (a lifecycle.Loop) from
// Start until Stop, which waits for that loop and then releases the lease
// (unless KeepOptions.Keep). It is the lease's part of the node's
// lifecycle.
type Keeper struct {
	l       *Lease
	opts    KeepOptions
	loop    *lifecycle.Loop
	started atomic.Bool
	release sync.Once
}

// Keeper returns the keeper of the lease; nothing runs before Start.
func (l *Lease) Keeper(opts KeepOptions) *Keeper {
	opts.Every = cmp.Or(opts.Every, max(l.ttl/3, time.Millisecond))
	opts.Retry = cmp.Or(opts.Retry, opts.Every)
	opts.Timeout = cmp.Or(opts.Timeout, opts.Every)
	k := &Keeper{l: l, opts: opts}
	k.loop = lifecycle.NewLoop(k.renew)
	return k
}

// Start renews the lease until Stop (ctx's values reach the renewals, its
// cancellation does not). A second Start does nothing.
func (k *Keeper) Start(ctx context.Context) error {
	k.started.Store(true)
	return k.loop.Start(ctx)
}

func (k *Keeper) renew(ctx context.Context) {
	l, opts := k.l, k.opts
	wait := opts.Every
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-opts.Wake:
			t.Stop()
		}
		// Renewals keep their own pace: the time a renewal took comes off
		// the wait for the next, so that a slow one does not push the
		// next toward the lease's end.
		began := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, opts.Timeout)
		err := l.claim.Renew(rctx)
		rcancel()
		wait = max(opts.Every-time.Since(began), time.Millisecond)
		if err == nil || ctx.Err() != nil {
			continue
		}
		if opts.OnError != nil {
			opts.OnError(fmt.Errorf("renew lease %s: %w", l.name, err))
		}
		if opts.GiveUp {
			return
		}
		wait = opts.Retry
	}
}

// Stop ends the renewals, waits for them, and releases the lease once
// (unless KeepOptions.Keep). Safe before Start and to repeat.
func (k *Keeper) Stop() {
	k.loop.Stop()
	if !k.started.Load() || k.opts.Keep {
		return
	}
	k.release.Do(func() {
		rctx, rcancel := context.WithTimeout(context.Background(), max(k.opts.Timeout, time.Second))
		defer rcancel()
		k.l.Release(rctx)
	})
}

// Slot is a claim that says how it wants renewing: the order-id slot
// (persistence.OrderIDs), whose renewal also extends its reservation of
// seconds.
type Slot interface {
	Claim
	LeaseTTL() time.Duration
	RenewEvery() time.Duration
	// Wake signals when the holder needs a renewal at once.
	Wake() <-chan struct{}
}

// KeepSlot is the keeper of an acquired slot as the lease name, which
// Stop releases: from Start it renews every RenewEvery, at once on Wake,
// and every second while renewals fail (each failure logged).
func KeepSlot(name string, s Slot, log *slog.Logger) *Keeper {
	every := s.RenewEvery()
	return Held(name, s.LeaseTTL(), s).Keeper(KeepOptions{
		Every: every, Retry: min(every, time.Second), Timeout: min(every, 5*time.Second), Wake: s.Wake(),
		OnError: func(err error) {
			log.Warn(name+" not renewed; grabs fail once its reservation runs out", "err", err)
		},
	})
}
