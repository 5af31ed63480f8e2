package node

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"flashsale/actors/writer"
	"flashsale/internal/breaker"
	"flashsale/internal/lifecycle"
)

// breakerWatch is the breaker's part of the node: the probe, which finds
// Redis back after an outage; the watch that says in one line when Redis
// changed (redisWatch; not for the in-process Redis, which never does);
// the rewarm runs they set off. Stop ends them, then closes the breaker
// (a re-sync after an outage uses the router and the database, so this
// part stops before them) and waits for the rewarm runs.
type breakerWatch struct {
	breaker    *breaker.Breaker
	prober     lifecycle.Service
	redisWatch lifecycle.Service // nil for the in-process Redis
	rewarm     *rewarmer
}

// buildBreakerWatch builds the probe and the watch of the stock Redis,
// whose changes rewarm the vouchers it lost.
func (a *app) buildBreakerWatch(context.Context) (lifecycle.Service, error) {
	a.rewarm.warmer, a.rewarm.log = a.warmer, a.log
	w := &breakerWatch{
		breaker: a.breaker,
		prober:  a.breaker.Prober(breakerProbeInterval, func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() }),
		rewarm:  &a.rewarm,
	}
	if a.mini == nil {
		rw := newRedisWatch(a.bg, a.log)
		rw.onChange = func(ctx context.Context) {
			a.wakers.wake()
			a.rewarm.trigger(ctx)
		}
		w.redisWatch = rw.job()
	}
	return w, nil
}

func (w *breakerWatch) Start(ctx context.Context) error {
	if err := w.rewarm.Start(ctx); err != nil {
		return err
	}
	if err := w.prober.Start(ctx); err != nil {
		return err
	}
	if w.redisWatch != nil {
		return w.redisWatch.Start(ctx)
	}
	return nil
}

func (w *breakerWatch) Stop() {
	w.rewarm.cancel() // a run under way ends with the probe and the watch
	if w.redisWatch != nil {
		w.redisWatch.Stop()
	}
	w.prober.Stop()
	w.breaker.Close() // a re-sync after an outage uses the router and the database
	w.rewarm.Stop()
}

// breakerProbeInterval is how often a node whose breaker is not closed
// pings Redis to find it back.
const breakerProbeInterval = 100 * time.Millisecond

// afterRedisOutage runs when the breaker closes again, before grabs use
// Redis: with the database fallback it waits for the database grabs under
// way, then re-syncs from the database every voucher the fallback sold
// (Redis's load does not know those sales); then every actor reloads what
// it cached. An error keeps grabs off Redis and is retried.
func (a *app) afterRedisOutage(ctx context.Context) error {
	if a.cfg.DegradeToDB {
		a.fallback.Barrier()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := a.catalog.ResyncDBSold(ctx); err != nil {
			return err
		}
	}
	// Status changes made while Redis was down are copied before grabs use
	// it again; a failure here is left to the status sync (every
	// STATUS_SYNC_INTERVAL) rather than keeping grabs off Redis.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := a.catalog.SyncStatuses(sctx); err != nil {
		a.log.Warn("voucher statuses not all copied to redis after the outage; the status sync retries", "err", err)
	}
	cancel()
	a.router.Resync()
	a.wakers.wake()
	a.rewarm.trigger(ctx)
	a.log.Info("redis is back; grabs use it again")
	return nil
}

// writerWaker wakes the node's log writers (writer.Wake) when Redis is
// back or its primaries changed: their backoff grew during the outage,
// and a reload's hold waits until a writer has read past this node's
// copy of its orders (measured: holds of 1.3-1.6 s after a Cluster
// failover, a writer waiting out a 2 s backoff; 0.2 s when it read at
// once). The writers add themselves as they are built.
type writerWaker struct {
	mu sync.Mutex
	ws []*writer.Writer
}

func (w *writerWaker) add(x *writer.Writer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ws = append(w.ws, x)
}

func (w *writerWaker) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.ws {
		x.Wake()
	}
}

// rewarmer rebuilds, in the background, every live voucher Redis no
// longer holds verified (a restart, a failover, a flush, evictions:
// catalog.PreheatStale), and their holds begin, now rather than at each
// one's next grab, so that a buyer who asks again a moment later finds
// the voucher selling, not a hold just begun. A load still verified costs
// one Redis call. One run at a time; a failed run is tried again, after
// rewarmRetryFirst and then twice as long each time up to
// rewarmRetryLast, and then leaves the rest to each voucher's next grab.
// It runs from Start (the breaker watch's) until Stop, which waits for
// the run under way.
type rewarmer struct {
	warmer interface {
		PreheatStale(ctx context.Context) (int, error)
	}
	log *slog.Logger

	// ctx is the runs' context, set by Start: no run before it.
	ctx            atomic.Pointer[context.Context]
	cancelRuns     context.CancelFunc
	running, again atomic.Bool
	runs           sync.WaitGroup
}

func (r *rewarmer) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancelRuns = cancel
	r.ctx.Store(&ctx)
	return nil
}

// cancel ends the run under way, if any, without waiting for it.
func (r *rewarmer) cancel() {
	if r.cancelRuns != nil {
		r.cancelRuns()
	}
}

func (r *rewarmer) Stop() {
	r.cancel()
	r.runs.Wait()
}

// trigger starts a run, or one more after the run under way: Redis may
// have lost loads.
func (r *rewarmer) trigger(context.Context) {
	pctx := r.ctx.Load()
	if pctx == nil || r.warmer == nil {
		return
	}
	// A change seen while a run is under way (another shard's circuit
	// closing) is served by one more run after it, not dropped.
	r.again.Store(true)
	if !r.running.CompareAndSwap(false, true) {
		return
	}
	ctx := *pctx
	r.runs.Add(1)
	go func() {
		defer r.runs.Done()
		for {
			for r.again.Swap(false) && ctx.Err() == nil {
				r.once(ctx)
			}
			r.running.Store(false)
			// A trigger between the last Swap and the Store found the run
			// still on and left it to this one.
			if !r.again.Load() || ctx.Err() != nil || !r.running.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// rewarmRetryFirst and rewarmRetryLast bound the waits between the tries
// of a failed run (about 3 s in all). A run set off by a failover can
// come before some clients follow the new primary (their slot maps reload
// in the background): it failed once with a refused connection, and the
// voucher waited for its next grab, 2 s later in the fault suite, to be
// rebuilt, and then for its hold.
const (
	rewarmRetryFirst = 50 * time.Millisecond
	rewarmRetryLast  = 1600 * time.Millisecond
)

// once is one run: the stale vouchers, rebuilt, tried again while it
// fails (see rewarmRetryFirst).
func (r *rewarmer) once(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	total := 0
	for wait := rewarmRetryFirst; ; wait *= 2 {
		n, err := r.warmer.PreheatStale(ctx)
		total += n
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			if total > 0 {
				r.log.Info("live vouchers reloaded after redis changed", "vouchers", total)
			}
			return
		case wait > rewarmRetryLast:
			r.log.Warn("live vouchers not all reloaded after redis changed; the rest reload at their next grab", "reloaded", total, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
