package writer

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"flashsale/domain"
)

// poll asks the actor for its next step; inc is the incarnation that sent
// it, seq the actor's count of polls scheduled when it did: only the
// newest is acted on, so that a wake (which schedules one at once) never
// leaves two chains of polls running.
type poll struct{ inc, seq int64 }

// wake asks the actor to end a pause now (Writer.Wake).
type wake struct{}

// writerActor is one incarnation of the persistence actor: its state
// lives only as long as it, and a restarted incarnation starts from what
// Redis holds (its own pending entries first).
type writerActor struct {
	w   *Writer
	inc int64

	logs       []string
	lastList   time.Time
	lastClaim  time.Time
	lastLag    time.Time
	lastReport time.Time // of the lease row (Family.Leases)
	wakeAt     time.Time // when the next step is due (schedule)
	ownPending bool      // re-read what this consumer name left unacknowledged
	backoff    time.Duration
	held       *heldBatch // read, not yet acknowledged
	timer      *time.Timer
	seq        int64 // of the poll scheduled last
}

// heldBatch is a batch between its read and its acknowledgement: refused
// holds what the handler refused for good so far.
type heldBatch struct {
	entries []domain.LogEntry
	refused map[int]*domain.Refusal
	handled bool
}

const minBackoff = 50 * time.Millisecond

func (a *writerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.inc = a.w.incarnation.Add(1)
		a.ownPending, a.backoff = true, minBackoff
		if a.inc > 1 {
			writerRestarts.WithLabelValues(a.w.fam.Name).Inc()
			a.w.log.Warn(a.w.fam.Name+" restarted after a failure; re-reading its pending entries", "incarnation", a.inc)
		}
		a.schedule(ctx, 0)
	case *actor.Restarting, *actor.Stopping:
		if a.timer != nil {
			a.timer.Stop()
		}
	case wake:
		// Redis is back: a backoff that began during the outage must not
		// keep orders unread (and a reload's hold waiting for them).
		a.backoff = minBackoff
		if !a.wakeAt.IsZero() && a.w.ctx.Err() == nil {
			a.schedule(ctx, 0)
		}
	case poll:
		if m.inc != a.inc || m.seq != a.seq || a.w.ctx.Err() != nil {
			return // a timer of an earlier incarnation, superseded, or stopping
		}
		if left := time.Until(a.wakeAt); left > 0 {
			// A pause that holds nothing still says so (see schedule).
			a.report(a.w.ctx)
			a.schedule(ctx, left)
			return
		}
		a.schedule(ctx, a.step(a.w.ctx))
	}
}

// schedule sends the next poll at once, or after d. A pause holding no
// batch (a backoff after a failed read, up to MaxBackoff) is cut into
// polls of reportEvery that only report the writer clean: a reload must
// not wait for a writer that holds nothing because it is backing off.
func (a *writerActor) schedule(ctx actor.Context, d time.Duration) {
	if a.timer != nil {
		a.timer.Stop()
	}
	a.seq++
	next := poll{inc: a.inc, seq: a.seq}
	if d <= 0 {
		a.wakeAt = time.Time{}
		ctx.Send(ctx.Self(), next)
		return
	}
	a.wakeAt = time.Now().Add(d)
	if a.held == nil && a.w.fam.Leases != nil {
		d = min(d, reportEvery)
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	a.timer = time.AfterFunc(d, func() { root.Send(self, next) })
}

// step does one bounded piece of work and returns how long to wait
// before the next.
func (a *writerActor) step(ctx context.Context) time.Duration {
	a.report(ctx)
	if a.held != nil {
		return a.finish(ctx)
	}
	w, o := a.w, a.w.opts
	if time.Since(a.lastList) > time.Second || len(a.logs) == 0 {
		logs, err := w.fam.Logs.List(ctx)
		if err != nil {
			return a.pause(ctx, "list logs", err)
		}
		a.logs, a.lastList = logs, time.Now()
		// Our own pending list holds nothing between batches, except
		// deliveries whose reply was lost. A failed read says so below,
		// but go-redis retries a read on a broken connection by itself
		// (MaxRetries), and then the loss is silent: look once a second.
		a.ownPending = true
		if len(logs) == 0 {
			a.updateLag(ctx, nil) // nothing left: every gauge to 0
			return o.Block
		}
	}
	var batch []domain.LogEntry
	var err error
	switch {
	case time.Since(a.lastClaim) > o.ClaimEvery:
		batch, err = a.reclaim(ctx)
		if err == nil {
			a.lastClaim = time.Now()
			if w.fam.Handler.Prune(ctx, a.logs) > 0 {
				a.lastList = time.Time{} // list again without the pruned ones
			}
			if n := w.fam.Logs.RemoveDeadConsumers(ctx, o.Consumer, a.logs, o.DeadConsumerIdle); n > 0 {
				w.log.InfoContext(ctx, w.fam.Name+" removed idle consumers holding no entries from its logs", "consumers", n)
			}
		}
	case a.ownPending:
		batch, err = w.fam.Logs.Read(ctx, o.Consumer, a.logs, "0", o.Batch, 0)
		if err == nil && len(batch) == 0 {
			a.ownPending = false
		}
	default:
		batch, err = w.fam.Logs.Read(ctx, o.Consumer, a.logs, ">", o.Batch, o.Block)
	}
	if err != nil {
		// Redis may have run the read and lost only its reply (a dropped
		// connection, or a kill after the append-only file took the
		// delivery): the entries then sit in our pending list, which only
		// a claim after ClaimIdle would find. The list of logs may be
		// stale too (Redis lost its data).
		a.ownPending, a.lastList = true, time.Time{}
		return a.pause(ctx, "read", err)
	}
	if len(batch) == 0 {
		if time.Since(a.lastLag) > time.Second {
			a.updateLag(ctx, a.logs)
			a.lastLag = time.Now()
		}
		return 0
	}
	a.held = &heldBatch{entries: batch, refused: map[int]*domain.Refusal{}}
	return a.finish(ctx)
}

// reportEvery is how often a writer refreshes its lease row: how long a
// reload of a voucher Redis lost may wait for a writer that holds nothing
// beyond its own read's Block.
const reportEvery = 100 * time.Millisecond

// report refreshes the writer's lease row, at most every reportEvery, at
// the start of a step: with no batch held, no read is in flight either,
// so the report says the writer is clean. A failed report is not retried:
// a reload then waits for this writer up to its hold's end, as without
// the rows.
func (a *writerActor) report(ctx context.Context) {
	rows := a.w.fam.Leases
	if rows == nil || time.Since(a.lastReport) < reportEvery {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, min(a.w.opts.AttemptTimeout, time.Second))
	defer cancel()
	if err := rows.Report(rctx, a.w.opts.Consumer, a.held == nil); err != nil {
		a.w.log.DebugContext(ctx, a.w.fam.Name+" could not refresh its lease row", "err", err)
		return
	}
	a.lastReport = time.Now()
}

// reclaim takes over entries other consumers left pending too long, under
// the Reclaim singleton when there is one.
func (a *writerActor) reclaim(ctx context.Context) ([]domain.LogEntry, error) {
	w, o := a.w, a.w.opts
	claim := func(ctx context.Context) ([]domain.LogEntry, error) {
		return w.fam.Logs.Claim(ctx, o.Consumer, a.logs, o.ClaimIdle, o.Batch)
	}
	var out []domain.LogEntry
	var err error
	if o.Reclaim == nil {
		out, err = claim(ctx)
	} else {
		_, err = o.Reclaim(ctx, func(ctx context.Context) error {
			var err error
			out, err = claim(ctx)
			return err
		})
	}
	if len(out) > 0 {
		w.log.InfoContext(ctx, w.fam.Name+" took over entries left by another consumer", "entries", len(out))
	}
	return out, err
}

// finish takes the held batch one step further: one attempt of the
// handler at what it has not refused, then the dead letters and the
// acknowledgement.
func (a *writerActor) finish(ctx context.Context) time.Duration {
	w, h := a.w, a.held
	if !h.handled {
		idx := make([]int, 0, len(h.entries))
		live := make([]domain.LogEntry, 0, len(h.entries))
		for i, e := range h.entries {
			if h.refused[i] == nil {
				idx, live = append(idx, i), append(live, e)
			}
		}
		if len(live) > 0 {
			r, err := a.handle(ctx, live)
			for j, why := range r {
				if why != nil && j >= 0 && j < len(idx) {
					h.refused[idx[j]] = why
				}
			}
			if err != nil {
				if w.fam.Failures != nil {
					w.fam.Failures.Inc()
				}
				return a.pause(ctx, "handle", err)
			}
		}
		h.handled = true
	}
	// From here a failure drops the batch from memory: its entries come
	// back as our own pending ones and replay as no-ops.
	a.held = nil
	if err := a.deadLetter(ctx, h); err != nil {
		a.ownPending = true
		return a.pause(ctx, "dead-letter", err)
	}
	if err := w.fam.Logs.Ack(ctx, h.entries); err != nil {
		a.ownPending = true
		return a.pause(ctx, "acknowledge", err)
	}
	a.backoff = minBackoff
	a.updateLag(ctx, a.logs)
	a.lastLag = time.Now()
	if len(h.entries) < w.opts.Batch && w.opts.Linger > 0 {
		return w.opts.Linger // let the next batch gather
	}
	return 0
}

// deadLetter hands the refused entries to the family's sink, under one
// attempt's deadline.
func (a *writerActor) deadLetter(ctx context.Context, h *heldBatch) error {
	if len(h.refused) == 0 {
		return nil
	}
	dead := make([]domain.DeadEntry, 0, len(h.refused))
	for i, e := range h.entries {
		if why := h.refused[i]; why != nil {
			dead = append(dead, domain.DeadEntry{Entry: e, Why: why})
		}
	}
	actx, cancel := context.WithTimeout(ctx, a.w.opts.AttemptTimeout)
	defer cancel()
	return a.w.fam.Handler.DeadLetter(actx, dead)
}

// pause logs a failed step and returns the backoff before the next,
// doubling it up to MaxBackoff.
func (a *writerActor) pause(ctx context.Context, step string, err error) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	d := a.backoff
	a.w.log.WarnContext(ctx, a.w.fam.Name+" retrying", "step", step, "err", err, "backoff", d.String())
	a.backoff = min(a.backoff*2, a.w.opts.MaxBackoff)
	return d
}

// updateLag samples the family's lag gauges. A failed sample leaves the
// gauges as they were: the next one corrects them.
func (a *writerActor) updateLag(ctx context.Context, logs []string) {
	f := a.w.fam
	if f.Lag == nil && f.LagSeconds == nil && f.Pending == nil {
		return
	}
	s, err := f.Logs.Sample(ctx, logs)
	if err != nil {
		return
	}
	set := func(g interface{ Set(float64) }, v float64) {
		if g != nil {
			g.Set(v)
		}
	}
	set(f.Lag, float64(s.Entries))
	set(f.Pending, float64(s.Pending))
	set(f.LagSeconds, s.Age.Seconds())
}
