package actors

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"flashsale/domain"
	"flashsale/internal/lease"
)

// grabMsg is one grab waiting for its answer. It never leaves this node
// (it carries a channel), so it needs no protobuf form.
type grabMsg struct {
	user int64
	ip   string
	req  string
	// keyed marks a grab that carries the client's idempotency key: it
	// may be the retry of one that sold (see voucherActor.decided).
	keyed bool
	reply chan domain.GrabResult
	// deadline is when the grab's caller stops waiting: a grab handed to
	// another member is waited for until then at most.
	deadline time.Time
	// done, if set, takes the answer instead of reply: a grab another
	// member sent (see Cluster) is answered by a message back to it.
	done func(res domain.GrabResult, segments int)
	ref  *voucherRef
	// hops counts how often the grab was handed to a new activation.
	hops int
	// admitted is set once the rate limits let the grab through: a grab
	// re-routed after a stale batch is not limited again (an answer of
	// RATE_LIMITED could hide a sale of its earlier attempt).
	admitted bool
	// rated is set once the per-user limit (userRates) admitted it, for
	// the same reason.
	rated bool
	// unproven is set once the activation's record of sales could not
	// decide the grab as a check: it goes to the script, never back to
	// the record.
	unproven bool
	// sentBefore: the member that handed the grab over says it may have
	// been in a script call before (GrabRequest.sent; see sent). Unlike a
	// grab taken here, it may still be abandoned while it waits here.
	sentBefore bool
	// state is grabWaiting until the actor puts the grab in a script call
	// (grabTaken) or the caller gives up first (grabAbandoned); whoever
	// moves it first decides, so a caller told UNAVAILABLE after a timeout
	// can be sure its grab never reached Redis.
	state atomic.Int32
	// span is the grab's caller's span, with Options.Tracer only: the
	// batch that carries the grab links it (batchSpan).
	span trace.Span
}

const (
	grabWaiting int32 = iota
	grabTaken
	grabAbandoned
	// grabForwarded: an activation handed the grab to another member
	// (reroute) before any script call of its own; the answer comes from
	// there, so the caller can no longer give up, yet the grab was never
	// in a script call (sent is false, and the new host may answer it
	// from memory).
	grabForwarded
)

// abandon marks a grab its caller no longer waits for; false means the
// grab is already in a script call, or with another member, and its
// answer is coming.
func (g *grabMsg) abandon() bool { return g.state.CompareAndSwap(grabWaiting, grabAbandoned) }

// take claims a grab for a script call; false means its caller gave up.
// A grab rerouted after a stale batch stays taken.
func (g *grabMsg) take() bool {
	return g.state.CompareAndSwap(grabWaiting, grabTaken) || g.state.Load() == grabTaken
}

// forward claims a grab for another member; false means its caller gave
// up. A grab that was in a script call before stays taken (sent).
func (g *grabMsg) forward() bool {
	return g.state.CompareAndSwap(grabWaiting, grabForwarded) || g.state.Load() == grabTaken
}

// sent reports whether the grab was in a script call before. Such a grab
// may have sold (an earlier attempt of its batch ran in Redis and lost its
// reply, then the retry met a newer activation's fence), so only its
// request id in Redis may decide it, never an activation's memory.
func (g *grabMsg) sent() bool { return g.sentBefore || g.state.Load() == grabTaken }

// maxHops bounds re-routing: two nodes whose activations keep superseding
// each other must not bounce a grab forever.
const maxHops = 3

// batchDone carries a batch's outcome back into the actor. out.Results
// has one result per grab of batch; scripted tells whether the script ran
// (it does not when the rate limits turned every grab away), that is
// whether out.State is news.
type batchDone struct {
	batch []*grabMsg
	// checks are keyed grabs that the activation's record of the sales
	// answers once this call's tally proves it whole (saleMemory); they
	// are not in the script call.
	checks   []*grabMsg
	out      domain.BatchOutcome
	scripted bool
	err      error
	// dbSold counts the units the database fallback sold in this batch.
	dbSold int
	// answered: the batch's goroutine already gave every grab its result
	// (final says when it may).
	answered bool
	// resent: a grab of the batch was in a script call before, so a sale
	// in this outcome may be one the record of sales never saw.
	resent bool
	// fallback: Redis was down and the batch was answered without it.
	fallback bool
	// claimed is set when the batch first claimed a new fence for its
	// segment (an earlier call was undecided): the activation serves
	// under it from now on.
	claimed *claimedFence
}

// claimedFence is a fence a batch claimed, with the state Redis returned.
type claimedFence struct {
	fence int64
	state domain.VoucherState
}

// final reports whether the outcome answers each grab of the batch for
// good, whatever the actor's state: the script ran under the newest fence
// and found the voucher, or the rate limits turned every grab away before
// it. A failed call, a stale fence and a vanished voucher are the actor's
// to handle (onBatch): their grabs may be re-routed, not answered.
func (d *batchDone) final() bool {
	return d.err == nil && !d.out.Stale && (!d.scripted || d.out.State.Found)
}

// reload asks the actor to re-read the voucher's state from Redis.
type reload struct{}

// moved tells an activation that its segment is hosted by another member
// now: it stops and releases its lease.
type moved struct{}

// leaseLost tells an activation that its lease could not be extended: it
// must stop serving, since another member may hold the lease now.
type leaseLost struct{ err error }

// deliver hands the grab its answer.
func (g *grabMsg) deliver(res domain.GrabResult, segments int) {
	if g.done != nil {
		g.done(res, segments)
		return
	}
	g.reply <- res // buffered: never blocks
}

// voucherActor sequences the grabs of one voucher. At most one script call
// is in flight; grabs that arrive meanwhile form the next batch, so the
// batch size follows the load (one grab when idle, BatchSize under a rush)
// and no grab waits on a timer.
type voucherActor struct {
	r   *Router
	ref *voucherRef
	id  int64
	seg int
	// lease is the segment's Redlock lease while this activation serves
	// (nil without Options.Leases); stopLease ends its renewals.
	lease     Lease
	stopLease func()

	fence      int64
	state      domain.VoucherState
	unusable   bool // stale fence or Redis unreachable at activation: stopping
	refused    bool // no lease: grabs are answered UNAVAILABLE, not re-routed
	pending    []*grabMsg
	inflight   bool
	wantReload bool
	// memo is the activation's record of the voucher's sales (nil: none),
	// from which keyed grabs after the sell-out are answered.
	memo *saleMemory
	// rates is the per-user rate limit of this activation (nil: off).
	rates *userRates
}

// Receive implements actor.Actor.
func (a *voucherActor) Receive(ctx actor.Context) {
	// A batch in flight is waited for (its grabs must hear how it went);
	// what the actor holds goes to a new activation.
	defer survive(a.r.log, "voucher", a.id, ctx.Message(), func() { a.retireAfterBatch(ctx) })
	switch m := ctx.Message().(type) {
	case *actor.Started:
		actorsAlive.Inc()
		a.activate(ctx)
	case *grabMsg:
		a.onGrab(ctx, m)
	case *batchDone:
		a.onBatch(ctx, m)
	case reload:
		if a.inflight {
			a.wantReload = true
			return
		}
		a.reload(ctx)
	case moved:
		if !a.unusable {
			a.r.log.Info("segment hosted by another member now; stopping", "voucher", a.id, "segment", a.seg)
			a.retireAfterBatch(ctx)
		}
	case leaseLost:
		if !a.unusable {
			a.r.log.Warn("segment lease lost; stopping", "voucher", a.id, "segment", a.seg, "err", m.err)
			leaseLosses.Inc()
			a.retireAfterBatch(ctx)
		}
	case *actor.Stopping:
		// However it stops (passivated, retired, or by protoactor), the
		// router must not send it another grab.
		a.r.forget(a.key(), a.ref)
		for _, g := range a.pending {
			a.answer(g, domain.GrabResult{Code: domain.SeckillUnavailable})
		}
		a.pending = nil
		a.releaseLease()
	case *actor.Stopped:
		actorsAlive.Dec()
	}
}

// retireAfterBatch retires the activation now, or, with a batch in
// flight, once its answer is in (onBatch checks unusable): the batch's
// grabs must hear how it went.
func (a *voucherActor) retireAfterBatch(ctx actor.Context) {
	if a.inflight {
		a.unusable = true
		a.r.forget(a.key(), a.ref)
		return
	}
	a.retire(ctx, nil)
}

func (a *voucherActor) key() segKey { return segKey{voucher: a.id, seg: a.seg} }

// activate claims a fencing token and loads the voucher, preheating it
// from the database if Redis does not have it. An id that is no seckill
// voucher gets an actor that answers NOT_FOUND from memory and is
// passivated soon.
//
// With Options.Leases, a voucher Redis knows is served only under the
// segment's lease: the activation takes it (waiting up to LeaseWait for
// another member to let go of it) before it claims its fencing token,
// renews it every TTL/3, and stops serving when a renewal fails. An
// activation that cannot get the lease answers UNAVAILABLE and stops.
func (a *voucherActor) activate(ctx actor.Context) {
	cctx, cancel := context.WithTimeout(context.Background(), a.r.opts.CallTimeout)
	defer cancel()
	if a.r.opts.Leases != nil {
		st, err := a.r.store.State(cctx, a.id)
		if err == nil && !st.Found {
			var found bool
			found, err = a.r.preheater.EnsurePreheated(cctx, a.id)
			st.Found = found
		}
		if err != nil {
			a.r.trouble.failed("voucher actor cannot start", a.id, err, "segment", a.seg)
			a.retire(ctx, nil)
			return
		}
		if st.Found && !a.takeLease(ctx) {
			a.refuse(ctx)
			return
		}
		cancel()
		cctx, cancel = context.WithTimeout(context.Background(), a.r.opts.CallTimeout)
		defer cancel()
	}
	tok := a.r.trust()
	fence, st, err := a.r.store.Claim(cctx, a.id, a.seg)
	if err == nil && !st.Found {
		var found bool
		if found, err = a.r.preheater.EnsurePreheated(cctx, a.id); err == nil && found {
			fence, st, err = a.r.store.Claim(cctx, a.id, a.seg)
		}
	}
	if err != nil {
		a.r.trouble.failed("voucher actor cannot start", a.id, err, "segment", a.seg)
		a.retire(ctx, nil)
		return
	}
	a.r.trouble.ok("voucher actor cannot start", a.id)
	a.fence, a.state = fence, st
	a.r.ledger.fenced(a.key(), st, a.r.trustedSince(tok))
	a.memo = newSaleMemory(st)
	if !st.Found {
		a.ref.unknown.Store(true)
		a.releaseLease() // nothing to guard
	} else {
		a.r.learnSegments(a.id, st.Segments)
	}
}

// takeLease takes the segment's lease and starts renewing it.
func (a *voucherActor) takeLease(ctx actor.Context) bool {
	wait := a.r.opts.LeaseWait
	lctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l, err := a.r.opts.Leases.Acquire(lctx, a.key().leaseName())
	if err != nil {
		a.r.trouble.failed("segment lease not granted; answering UNAVAILABLE", a.id, err, "segment", a.seg)
		leaseRefusals.Inc()
		return false
	}
	a.r.trouble.ok("segment lease not granted; answering UNAVAILABLE", a.id)
	// Renewed every TTL/3, each renewal bounded by as much; the first
	// that fails stops the activation (leaseLost): another member may hold
	// the segment from then on.
	self, system, every := ctx.Self(), a.r.system, max(l.TTL()/3, time.Millisecond)
	a.lease = l
	keeper := lease.Held(a.key().leaseName(), l.TTL(), heldLease{l}).Keeper(lease.KeepOptions{
		Every: every, Timeout: every, GiveUp: true, Keep: true,
		OnError: func(err error) { system.Root.Send(self, leaseLost{err: err}) },
	})
	_ = keeper.Start(context.Background())
	a.stopLease = keeper.Stop
	return true
}

// heldLease is a segment's lease as a lease.Keeper renews it.
type heldLease struct{ l Lease }

// Renew extends the lease under the renewal's deadline but not its
// cancellation: a renewal in flight when the activation stops finishes.
// Cut short, it would read as a lease lost for want of Redis, whose
// release is skipped (node's segmentLease), and the segment's
// next host would wait out the TTL.
func (h heldLease) Renew(ctx context.Context) error {
	rctx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(rctx, dl)
		defer cancel()
	}
	return h.l.Extend(rctx)
}

func (h heldLease) Release(ctx context.Context) error {
	h.l.Release(ctx)
	return nil
}

// releaseLease stops the renewals and lets the lease go, without holding
// up the actor: a renewal in flight is waited for, and the release made,
// in the background.
func (a *voucherActor) releaseLease() {
	if a.lease == nil {
		return
	}
	l, stop := a.lease, a.stopLease
	a.lease, a.stopLease = nil, nil
	go func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.Release(ctx)
	}()
}

// refuse stops an activation that could not take its lease: the grabs that
// reach it are answered UNAVAILABLE (none of them reached Redis), and the
// next grab starts a new activation that tries again.
func (a *voucherActor) refuse(ctx actor.Context) {
	a.unusable, a.refused = true, true
	a.r.forget(a.key(), a.ref)
	ctx.Poison(ctx.Self())
}

func (a *voucherActor) reload(ctx actor.Context) {
	cctx, cancel := context.WithTimeout(context.Background(), a.r.opts.CallTimeout)
	defer cancel()
	tok := a.r.trust()
	st, err := a.r.store.State(cctx, a.id)
	if err != nil {
		// Keep serving: the script checks the truth on every sale; only a
		// cached "no" may be outdated, and the next event fixes it.
		a.r.trouble.failed("voucher actor reload failed", a.id, err)
		a.drain(ctx) // grabs that waited for the reload must still go out
		return
	}
	if a.state.Found && !st.Found {
		// Redis lost the voucher (a restart without persistence): a new
		// activation preheats it again from the database.
		a.retire(ctx, nil)
		return
	}
	a.r.trouble.ok("voucher actor reload failed", a.id)
	a.r.learnSegments(a.id, st.Segments)
	a.r.ledger.confirm(a.key(), st, a.r.trustedSince(tok))
	limit := a.state.Limit
	a.state = st
	if a.state.Limit == 0 {
		a.state.Limit = limit
	}
	a.drain(ctx)
}

// retire stops an activation that must not serve (superseded fence, Redis
// lost the voucher, Redis unreachable at start): it leaves the router, so
// new grabs go to a new activation, hands the grabs it holds (and those
// still arriving in its mailbox) to that new activation, and stops after
// what is already in its mailbox.
func (a *voucherActor) retire(ctx actor.Context, held []*grabMsg) {
	a.unusable = true
	a.r.forget(a.key(), a.ref)
	for _, g := range append(held, a.pending...) {
		a.reroute(g)
	}
	a.pending = nil
	ctx.Poison(ctx.Self())
}

// reroute hands a grab to the voucher's current activation, or answers it
// UNAVAILABLE when it has moved too often.
func (a *voucherActor) reroute(g *grabMsg) {
	g.ref.queued.Add(-1)
	a.r.load.queued.Add(-1)
	g.hops++
	if g.hops > maxHops {
		g.deliver(domain.GrabResult{Code: domain.SeckillUnavailable}, 0)
		return
	}
	key := a.key()
	if c := a.r.cluster; c != nil && !c.Local(key) {
		if !g.forward() { // its caller gave up: it must never reach Redis now
			g.deliver(domain.GrabResult{Code: domain.SeckillUnavailable}, 0)
			return
		}
		go func() { // the segment moved: hand the grab to its new host
			res, segs := c.request(context.Background(), key, g)
			g.deliver(res, segs)
		}()
		return
	}
	if !a.r.send(key, g) {
		g.deliver(domain.GrabResult{Code: domain.SeckillUnavailable}, 0)
	}
}

// decided answers g from memory when the cached state decides it. A grab
// that may have sold is left to the script, which looks up its request id
// before anything else: one that was in a script call before (see
// grabMsg.sent), and, while the sale lasts, one that carries the client's
// key, which may retry a grab whose reply was lost. So a keyed grab after
// the sell-out waits for a script call (in a batch) where an unkeyed one
// waits for nothing; the activation's record of the sales spares that
// call the grab's lookups (fromMemory).
func (a *voucherActor) decided(g *grabMsg, now time.Time) (domain.SeckillCode, bool) {
	if g.sent() {
		return "", false
	}
	code, ok := a.known(now)
	if ok && g.keyed && (code == domain.SeckillSoldOut || code == domain.SeckillPaused) {
		return "", false
	}
	return code, ok
}

// fromMemory reports whether g, which the cached state would refuse but
// may retry a sale (decided), goes to the next script call only as a
// check: answered from the record of the sales once the call proves the
// record whole, instead of as one of the script's grabs.
func (a *voucherActor) fromMemory(g *grabMsg, now time.Time) bool {
	if !g.keyed || g.unproven || a.memo == nil {
		return false
	}
	code, ok := a.known(now)
	return ok && (code == domain.SeckillSoldOut || code == domain.SeckillPaused)
}

// known answers from memory when the cached state already decides.
func (a *voucherActor) known(now time.Time) (domain.SeckillCode, bool) {
	st := a.state
	switch {
	case !st.Found:
		return domain.SeckillNotFound, true
	case st.Status == domain.StatusPaused:
		return domain.SeckillPaused, true
	case st.Status == domain.StatusEnded:
		return domain.SeckillEnded, true
	case now.Before(st.Begin):
		return domain.SeckillNotStarted, true
	case !now.Before(st.End):
		return domain.SeckillEnded, true
	case st.Remaining <= 0:
		return domain.SeckillSoldOut, true
	}
	return "", false
}

func (a *voucherActor) onGrab(ctx actor.Context, g *grabMsg) {
	if a.refused {
		a.answer(g, domain.GrabResult{Code: domain.SeckillUnavailable})
		return
	}
	if a.unusable {
		a.reroute(g)
		return
	}
	if code, ok := a.decided(g, time.Now()); ok {
		a.answer(g, domain.GrabResult{Code: code})
		return
	}
	a.pending = append(a.pending, g)
	if !a.inflight {
		a.flush(ctx)
	}
}

// drain answers pending grabs that memory now decides and sends the rest.
func (a *voucherActor) drain(ctx actor.Context) {
	now := time.Now()
	keep := a.pending[:0]
	for _, g := range a.pending {
		if code, ok := a.decided(g, now); ok {
			a.answer(g, domain.GrabResult{Code: code})
		} else {
			keep = append(keep, g)
		}
	}
	clear(a.pending[len(keep):])
	a.pending = keep
	if len(a.pending) > 0 && !a.inflight {
		a.flush(ctx)
	}
}

// flush sends up to BatchSize pending grabs through one script call, off
// the actor's goroutine; the outcome comes back as a batchDone message.
func (a *voucherActor) flush(ctx actor.Context) {
	batch := make([]*grabMsg, 0, min(len(a.pending), a.r.opts.BatchSize))
	var checks []*grabMsg
	resent := false
	clock := time.Now()
	now := clock.UnixNano()
	n := 0
	for ; n < len(a.pending) && len(batch)+len(checks) < a.r.opts.BatchSize; n++ {
		g := a.pending[n]
		// A grab in a script call before may have sold: its request id
		// decides it, never a limit (see grabMsg.admitted).
		sent := g.sent()
		// A check never reaches the script, so it is not taken: it stays
		// a grab that never was in a script call (grabMsg.sent).
		check := !sent && a.fromMemory(g, clock)
		if check && g.state.Load() == grabAbandoned || !check && !g.take() {
			a.answer(g, domain.GrabResult{Code: domain.SeckillUnavailable}) // nobody reads it
			continue
		}
		if a.rates != nil && !g.rated && !sent {
			if wait := a.rates.take(g.user, now); wait > 0 {
				userRateRefusals.Inc()
				a.answer(g, domain.GrabResult{Code: domain.SeckillRateLimited, RetryAfter: wait})
				continue
			}
			g.rated = true
		}
		if check {
			checks = append(checks, g)
			continue
		}
		resent = resent || sent
		batch = append(batch, g)
	}
	rest := copy(a.pending, a.pending[n:])
	clear(a.pending[rest:])
	a.pending = a.pending[:rest]
	if len(batch) == 0 && len(checks) == 0 {
		return
	}
	a.inflight = true
	if len(batch) > 0 {
		batchSize.Observe(float64(len(batch)))
	}
	self, fence := ctx.Self(), a.fence
	key, segments := a.key(), a.state.Segments
	go func() {
		var d *batchDone
		spanCtx, span := a.r.batchSpan(a.id, batch, checks)
		defer span.End()
		// The call is in the node's ledger before anything can send it,
		// so that no database sale overlaps it (see nodeLedger).
		call := a.r.ledger.begin(key, batch)
		if h := a.r.opts.Redis; h != nil && !h.Usable() {
			a.r.ledger.settle(call) // never sent
			d = a.r.redisDown(a.id, batch)
			d.checks, d.fallback = checks, true // the checks wait for the next call, without the record
		} else {
			d = a.r.callRedis(spanCtx, key, fence, call, batch, checks)
			d.resent = resent
			if d.final() {
				// The callers hear their answers now, not after one more
				// hop through the actor's mailbox; the actor takes the
				// outcome's news when batchDone reaches it.
				for i, g := range batch {
					a.r.carry(g, d.out.Results[i])
					g.deliver(d.out.Results[i], segments)
					a.r.unqueue(g)
				}
				d.answered = true
			}
		}
		a.r.system.Root.Send(self, d)
	}()
}

func (a *voucherActor) onBatch(ctx actor.Context, d *batchDone) {
	a.inflight = false
	if d.claimed != nil {
		a.fence = d.claimed.fence
	}
	switch {
	case d.err != nil:
		a.r.trouble.failed("grab batch failed", a.id, d.err, "grabs", len(d.batch))
		a.dropMemo() // the call may have sold without saying so
		for _, g := range append(d.batch, d.checks...) {
			a.answer(g, domain.GrabResult{Code: domain.SeckillUnavailable})
		}
		// The grabs that queued behind it never reached Redis: answer them
		// now rather than let each wait out a batch of its own against a
		// Redis that just failed (a stall must cost one batch deadline, not
		// one per batch queued). Those that were in a script call before
		// may have sold, and only their request id may decide them.
		keep := a.pending[:0]
		for _, g := range a.pending {
			if g.sent() {
				keep = append(keep, g)
			} else {
				a.answer(g, domain.GrabResult{Code: domain.SeckillUnavailable})
			}
		}
		clear(a.pending[len(keep):])
		a.pending = keep
	case d.out.Stale:
		a.r.log.Info("voucher actor superseded by a newer activation; stopping", "voucher", a.id, "fence", a.fence)
		// Nothing of the batch was sold by this call, but an earlier
		// attempt may have sold and lost its reply: the new activation
		// asks Redis about these grabs, whatever it caches (grabMsg.sent).
		a.retire(ctx, append(d.batch, d.checks...))
		return
	case d.scripted && !d.out.State.Found && a.state.Found:
		// Redis lost the voucher; nothing of the batch was sold.
		a.r.log.Warn("voucher vanished from redis; re-activating", "voucher", a.id)
		a.retire(ctx, append(d.batch, d.checks...))
		return
	default:
		a.r.trouble.ok("grab batch failed", a.id)
		a.state.Remaining -= d.dbSold
		switch {
		case !d.scripted:
		case d.out.State.Found:
			limit := a.state.Limit
			a.state = d.out.State
			a.state.Limit = limit
		default:
			a.state = domain.VoucherState{}
		}
		sold := d.dbSold > 0
		for i, g := range d.batch {
			sold = sold || d.out.Results[i].Code == domain.SeckillOK
			if !d.answered {
				a.answer(g, d.out.Results[i])
			}
		}
		if sold && a.r.opts.Sold != nil {
			a.r.opts.Sold(a.id)
		}
		a.learnSales(d)
	}
	if a.unusable { // retired while the batch was out (moved, lease lost)
		a.retire(ctx, nil)
		return
	}
	if a.wantReload {
		a.wantReload = false
		a.reload(ctx)
		return
	}
	a.drain(ctx)
}

// learnSales takes a successful batch's sales into the record of sales,
// drops the record when the batch may hold a sale it cannot see or the
// call's tally disagrees with it, and then answers the batch's checks
// from the record, as the script would have at that call; a check the
// record cannot decide waits for the next script call, as a grab of it.
func (a *voucherActor) learnSales(d *batchDone) {
	if a.memo != nil {
		switch {
		case d.fallback || d.resent || d.dbSold > 0:
			a.dropMemo()
		case d.scripted && (!a.memo.record(d.batch, d.out.Results) || !a.memo.matches(d.out.State.Tally)):
			a.dropMemo()
		}
	}
	var undecided []*grabMsg
	for _, g := range d.checks {
		if a.memo != nil && d.scripted {
			if res, ok := a.memo.answer(g, d.out.Refusal, d.out.State.Remaining, a.state.Limit); ok {
				saleMemoryAnswers.Inc()
				a.answer(g, res)
				continue
			}
		}
		g.unproven = true // the script decides it now (fromMemory)
		undecided = append(undecided, g)
	}
	if len(undecided) > 0 {
		a.pending = append(undecided, a.pending...)
	}
}

// dropMemo gives up the record of sales for the rest of the activation.
func (a *voucherActor) dropMemo() {
	if a.memo != nil {
		a.memo = nil
		saleMemoryDrops.Inc()
	}
}

func (a *voucherActor) answer(g *grabMsg, res domain.GrabResult) {
	g.deliver(res, a.state.Segments)
	a.r.unqueue(g)
}

// unqueue counts an answered grab out of its voucher's and the node's
// queues.
func (r *Router) unqueue(g *grabMsg) {
	g.ref.queued.Add(-1)
	r.load.queued.Add(-1)
}

// runBatch admits the batch under the rate limits (one pipelined round
// trip), allocates order ids for the admitted grabs and runs the script on
// them, retrying with the same request and order ids when a call fails.
// The outcome has one result per grab of batch, in order.
//
// check asks for the script call even when no grab is left for it (none
// or all turned away by the limits): the call then only reads the
// voucher and its tally, for the batch's checks (batchDone.checks).
//
// maySell reports that an attempt failed in a way that does not prove it
// never ran (a timeout, not a refusal): Redis may have run it, or may run
// it still, whatever the outcome says.
func (r *Router) runBatch(batchCtx context.Context, key segKey, fence int64, batch []*grabMsg, check bool) (out domain.BatchOutcome, scripted, maySell bool, err error) {
	voucherID := key.voucher
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(batchCtx, r.opts.CallTimeout)
	}
	results := make([]domain.GrabResult, len(batch))
	ctx, cancel := call()
	waits, err := r.admit(ctx, voucherID, batch)
	cancel()
	if err != nil {
		return domain.BatchOutcome{}, false, false, err
	}
	admitted := make([]int, 0, len(batch))
	for i, wait := range waits {
		if wait > 0 {
			results[i] = domain.GrabResult{Code: domain.SeckillRateLimited, RetryAfter: wait}
		} else {
			admitted = append(admitted, i)
		}
	}
	if len(admitted) == 0 && !check {
		return domain.BatchOutcome{Results: results}, false, false, nil
	}
	var ids []int64
	if len(admitted) > 0 {
		ctx, cancel = call()
		ids, err = r.ids.Take(ctx, len(admitted))
		cancel()
		if err != nil {
			return domain.BatchOutcome{}, false, false, err
		}
	}
	grabs := make([]domain.Grab, len(admitted))
	for j, i := range admitted {
		grabs[j] = domain.Grab{RequestID: batch[i].req, UserID: batch[i].user, OrderID: ids[j]}
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := call()
		out, err := r.store.Grab(ctx, voucherID, key.seg, fence, grabs)
		cancel()
		if err == nil {
			if !out.Stale {
				for j, i := range admitted {
					results[i] = out.Results[j]
				}
				out.Results = results
			}
			return out, true, maySell, nil
		}
		maySell = maySell || !errors.Is(err, domain.ErrNotSent)
		if attempt >= r.opts.Attempts || batchCtx.Err() != nil {
			return out, false, maySell, err
		}
		select { // a short pause before the next attempt, within the deadline
		case <-batchCtx.Done():
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
}

// redisDown answers a batch while Redis is down, without a call to it:
// UNAVAILABLE, or, with the database fallback, each grab sold by the
// database in turn, from the node's ledger's view of the stock Redis has
// left (see nodeLedger, and persistence.DBGrabs for why the database sells
// only while its stock equals it); each sale takes one off it. A grab
// whose user or request id is in a call Redis may still run is answered
// UNAVAILABLE: only Redis can decide it. Rate limits live in Redis and are
// not checked meanwhile.
func (r *Router) redisDown(voucherID int64, batch []*grabMsg) *batchDone {
	d := &batchDone{batch: batch, out: domain.BatchOutcome{Results: make([]domain.GrabResult, len(batch))}}
	for i := range d.out.Results {
		d.out.Results[i].Code = domain.SeckillUnavailable
	}
	if r.opts.Fallback == nil {
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.GrabTimeout)
	defer cancel()
	ids, err := r.ids.Take(ctx, len(batch))
	if err != nil {
		r.log.Warn("database grab: no order ids", "voucher", voucherID, "err", err)
		return d
	}
	seller := r.ledger.seller(voucherID)
	for i, g := range batch {
		seller.Lock()
		if view, ok := r.ledger.fallbackView(voucherID, g); ok {
			res, sold, err := r.opts.Fallback.Grab(ctx, voucherID, view, domain.Grab{RequestID: g.req, UserID: g.user, OrderID: ids[i]})
			switch {
			case err != nil:
				r.log.Warn("database grab failed", "voucher", voucherID, "err", err)
			case sold:
				r.ledger.soldFromDB(voucherID)
				d.dbSold++
				fallthrough
			default:
				d.out.Results[i] = res
			}
		}
		seller.Unlock()
	}
	return d
}

// callRedis runs a batch through Redis and keeps the node's ledger: an
// undecided call of the segment first makes the batch take a new fence
// (Refence: so that Redis refuses that call should it still run; only
// while the activation's fence is the newest, else the activation is
// stale); a call that failed without proof that it never ran stays in the
// ledger as undecided; an answer takes its sales off the ledger's view.
func (r *Router) callRedis(ctx context.Context, key segKey, fence int64, call *ledgerCall, batch, checks []*grabMsg) *batchDone {
	d := &batchDone{batch: batch, checks: checks}
	// One deadline for the whole batch (new fence, limits, ids, every
	// attempt): the callers wait for it, so it must end. ctx carries the
	// batch's span only, never a caller's deadline.
	batchCtx, cancel := context.WithTimeout(ctx, min(r.opts.BatchTimeout, r.opts.GrabTimeout))
	defer cancel()
	tok := r.trust()
	if r.ledger.unsure(key) {
		ctx, cancel := context.WithTimeout(batchCtx, r.opts.CallTimeout)
		f, st, superseded, err := r.store.Refence(ctx, key.voucher, key.seg, fence)
		cancel()
		switch {
		case err != nil:
			r.ledger.settle(call) // the batch was not sent
			d.err = fmt.Errorf("take a new fence after an undecided call: %w", err)
			return d
		case superseded: // another activation's fence already refuses the undecided calls
			r.ledger.superseded(call, false)
			d.out.Stale = true
			return d
		}
		r.ledger.fenced(key, st, r.trustedSince(tok))
		d.claimed = &claimedFence{fence: f, state: st}
		if !st.Found { // Redis lost the voucher: the activation retires (onBatch)
			r.ledger.settle(call)
			d.scripted, d.out.State = true, st
			return d
		}
		fence = f
	}
	out, scripted, maySell, err := r.runBatch(batchCtx, key, fence, batch, len(checks) > 0)
	d.out, d.scripted, d.err = out, scripted, err
	switch {
	case err == nil && out.Stale:
		r.ledger.superseded(call, maySell)
	case err != nil || scripted && !out.State.Found:
		if maySell {
			r.ledger.undecided(call)
		} else {
			r.ledger.settle(call)
		}
	default:
		sold := 0
		for _, res := range out.Results {
			if res.Code == domain.SeckillOK {
				sold++ // a replayed request id counts again: the view only errs low
			}
		}
		r.ledger.answered(call, sold, out.State, scripted && r.trustedSince(tok))
	}
	return d
}

// trustToken is taken before a read of Redis: the outage epoch, and
// whether Redis was usable then.
type trustToken struct {
	epoch  uint64
	usable bool
}

func (r *Router) trust() trustToken {
	if r.opts.Redis == nil {
		return trustToken{usable: true}
	}
	return trustToken{epoch: r.opts.Redis.Epoch(), usable: r.opts.Redis.Usable()}
}

// trustedSince reports whether a state read from Redis since tok may serve
// the database fallback: Redis was usable before and after the read, with
// no outage between (not read while the node re-synced Redis after an
// outage, which would hide the database's sales).
func (r *Router) trustedSince(tok trustToken) bool {
	if r.opts.Redis == nil {
		return true
	}
	return tok.usable && r.opts.Redis.Usable() && r.opts.Redis.Epoch() == tok.epoch
}

// admit checks the batch against the rate limits in one round trip and
// returns, per grab, how long it must wait (0: admitted). A grab admitted
// once is not checked again when a stale batch re-routes it.
func (r *Router) admit(ctx context.Context, voucherID int64, batch []*grabMsg) ([]time.Duration, error) {
	waits := make([]time.Duration, len(batch))
	lim := r.opts.Limits
	if lim == nil || !lim.Enabled() {
		return waits, nil
	}
	var checks []domain.RateCheck
	var checked []int
	for i, g := range batch {
		if !g.admitted {
			checks = append(checks, domain.RateCheck{IP: g.ip})
			checked = append(checked, i)
		}
	}
	if len(checks) == 0 {
		return waits, nil
	}
	got, err := lim.Admit(ctx, voucherID, checks)
	if err != nil {
		return nil, fmt.Errorf("rate limits of voucher %d: %w", voucherID, err)
	}
	for j, i := range checked {
		waits[i] = got[j]
		batch[i].admitted = got[j] <= 0
	}
	return waits, nil
}
