package actors

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"flashsale/domain"
	"flashsale/internal/metrics"
)

// Red packets are the second kind of sale the router sequences: an actor
// per red packet, in the router's actor system and under its options
// (batch size, queue bound, deadlines, attempts, Redis health), drains its
// mailbox in batches and runs each through ONE grab script call, answering
// EMPTY, EXPIRED and NOT_FOUND from memory once it knows them. Unlike a
// voucher's it needs no fencing token: the script records each user with
// their packet, so two activations can never hand a user two packets.

// RedPacketStore is the Redis side of red packets
// (persistence.RedPacketRedis).
type RedPacketStore interface {
	State(ctx context.Context, id int64) (domain.RedPacketState, error)
	Grab(ctx context.Context, id int64, grabs []domain.RedPacketGrab) (domain.RedPacketBatch, error)
	// Holders is who holds a packet and its cents; read once the red
	// packet is empty, when it no longer changes.
	Holders(ctx context.Context, id int64) (map[int64]int64, error)
}

// RedPacketLoader loads a red packet Redis does not have from the
// database (persistence.RedPacketStore) and returns its state: not Found
// for an unknown id; an expired one is not loaded, and its state says so.
type RedPacketLoader interface {
	Load(ctx context.Context, id int64) (domain.RedPacketState, error)
}

var redPacketGrabs = metrics.CounterVec("red_packet_grab_total", "Red-packet grabs answered, by outcome.", "code")

// RedPackets routes red-packet grabs to their red packet's actor.
type RedPackets struct {
	r      *Router
	store  RedPacketStore
	loader RedPacketLoader

	mu     sync.RWMutex
	actors map[int64]*voucherRef // the same handle as a voucher's activation
}

// RedPackets returns the router's red-packet sequencer, whose actors run
// in the router's actor system: the router's scanner passivates them, and
// they stop with Router.Stop.
func (r *Router) RedPackets(store RedPacketStore, loader RedPacketLoader) *RedPackets {
	p := &RedPackets{r: r, store: store, loader: loader, actors: map[int64]*voucherRef{}}
	r.mu.Lock()
	r.redPackets = append(r.redPackets, p)
	r.mu.Unlock()
	return p
}

// rpGrabMsg is one red-packet grab waiting for its answer.
type rpGrabMsg struct {
	grab  domain.RedPacketGrab
	keyed bool
	reply chan domain.RedPacketResult
	ref   *voucherRef
	hops  int // times handed on by a stopped actor (reroute)
}

func (m *rpGrabMsg) queuedOn(ref *voucherRef) { m.ref = ref }

// Grab grabs a packet of the red packet for the user; requestID is the
// client's idempotency key ("" for none). UNAVAILABLE is safe to retry: a
// grab that did take a packet answers ALREADY_GRABBED with its amount.
func (p *RedPackets) Grab(ctx context.Context, id, userID int64, requestID string) domain.RedPacketResult {
	start := time.Now()
	res := p.grab(ctx, id, userID, requestID)
	now := time.Now()
	p.r.load.observe(now.Sub(start), now)
	p.r.answered.Add(1)
	redPacketGrabs.WithLabelValues(string(res.Code)).Inc()
	return res
}

func (p *RedPackets) grab(ctx context.Context, id, userID int64, requestID string) domain.RedPacketResult {
	msg := &rpGrabMsg{
		grab:  domain.RedPacketGrab{UserID: userID, RequestID: p.r.requestID(domain.GrabRequest{UserID: userID, RequestID: requestID})},
		keyed: requestID != "",
		reply: make(chan domain.RedPacketResult, 1),
	}
	if !p.send(id, msg) {
		return domain.RedPacketResult{Code: domain.RedPacketUnavailable}
	}
	// A red-packet grab is not taken back from its actor: UNAVAILABLE at
	// the deadline, and a retry under its request id finds a packet it
	// took (ALREADY_GRABBED with the amount).
	return awaitAnswer(ctx, msg.reply, p.r.opts.GrabTimeout, func() bool { return true }, domain.RedPacketResult{Code: domain.RedPacketUnavailable}, func() {})
}

// send enqueues msg for the red packet's actor, spawning it if needed (see
// sendTo).
func (p *RedPackets) send(id int64, msg *rpGrabMsg) bool {
	return sendTo(p.r, &p.mu, p.actors, id, msg, func(ref *voucherRef) *actor.PID {
		a := &redPacketActor{p: p, ref: ref, id: id}
		return p.r.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return a }))
	})
}

// forget drops ref if it is still the red packet's actor.
func (p *RedPackets) forget(id int64, ref *voucherRef) {
	p.mu.Lock()
	if p.actors[id] == ref {
		delete(p.actors, id)
	}
	p.mu.Unlock()
}

// Active reports whether this node has an actor for the red packet.
func (p *RedPackets) Active(id int64) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.actors[id] != nil
}

// redPacketActor sequences the grabs of one red packet, one script call
// in flight at a time, like voucherActor.
type redPacketActor struct {
	p     *RedPackets
	ref   *voucherRef
	id    int64
	state domain.RedPacketState
	// holders is who holds a packet (user -> cents), read when the red
	// packet is known empty: nil until then, or if the read failed, and
	// then only the script answers.
	holders  map[int64]int64
	pending  []*rpGrabMsg
	inflight bool
	// stopped: a panic stopped it (stop); what reaches it goes on.
	stopped bool
}

// rpBatchDone carries a batch's outcome back into the actor.
type rpBatchDone struct {
	batch []*rpGrabMsg
	out   domain.RedPacketBatch
	err   error
}

// Receive implements actor.Actor.
func (a *redPacketActor) Receive(ctx actor.Context) {
	defer survive(a.p.r.log, "red_packet", a.id, ctx.Message(), func() { a.stop(ctx) })
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.activate(false)
	case *rpGrabMsg:
		if a.stopped {
			a.reroute(m)
			return
		}
		if res, ok := a.known(m, time.Now()); ok {
			a.answer(m, res)
			return
		}
		a.pending = append(a.pending, m)
		a.flush(ctx)
	case *rpBatchDone:
		a.onBatch(ctx, m)
	case *actor.Stopping:
		a.p.forget(a.id, a.ref)
		for _, g := range a.pending {
			a.answer(g, domain.RedPacketResult{Code: domain.RedPacketUnavailable})
		}
		a.pending = nil
	}
}

// stop takes the actor out of the red packets' map, so that the next
// grab starts a new one, and stops it after what its mailbox holds: the
// grabs there go to the new one (reroute), since what this one knows may
// be what its panic left.
func (a *redPacketActor) stop(ctx actor.Context) {
	a.stopped = true
	a.p.forget(a.id, a.ref)
	for _, g := range a.pending {
		a.reroute(g)
	}
	a.pending = nil
	ctx.Poison(ctx.Self())
}

// reroute hands a grab this stopped actor holds to the red packet's next
// actor (none of its grabs reached a script call here), or answers it
// UNAVAILABLE when none can take it or it has moved too often.
func (a *redPacketActor) reroute(g *rpGrabMsg) {
	g.ref.queued.Add(-1)
	a.p.r.load.queued.Add(-1)
	g.hops++
	if g.hops > maxHops || !a.p.send(a.id, g) {
		g.reply <- domain.RedPacketResult{Code: domain.RedPacketUnavailable} // buffered: never blocks
	}
}

// activate reads the red packet, loading it from the database when Redis
// does not have it; reload loads it whatever Redis seems to hold (the grab
// script refused the load Redis holds: it was not verified on the server
// that runs now, see grab_red_packet.lua). A failure leaves the state unknown (not Found) with
// the script still to decide each grab, which answers NOT_FOUND for a red
// packet Redis lacks: a grab never gets EMPTY or EXPIRED from a guess.
func (a *redPacketActor) activate(reload bool) {
	ctx, cancel := context.WithTimeout(context.Background(), a.p.r.opts.BatchTimeout)
	defer cancel()
	var st domain.RedPacketState
	var err error
	if !reload {
		st, err = a.p.store.State(ctx, a.id)
	}
	if reload || err == nil && !st.Found {
		st, err = a.p.loader.Load(ctx, a.id)
	}
	if err != nil {
		a.p.r.log.Warn("red packet actor cannot read its red packet", "red_packet", a.id, "err", err)
		a.state = domain.RedPacketState{Found: true} // unknown: let the script decide
		return
	}
	a.state = st
	a.ref.unknown.Store(!st.Found) // passivated soon (see unknownIdle)
	a.readHolders()
}

// readHolders reads, once the red packet is known empty, who holds its
// packets, so that an empty red packet is still answered from memory
// without telling a holder EMPTY. A failed read leaves holders nil: the
// script answers until the next batch. A packet the database refused goes
// back to Redis, so a red packet seen with packets again forgets its
// holders and reads them anew once empty.
func (a *redPacketActor) readHolders() {
	if !a.state.Found || a.state.ExpiresAt.IsZero() || a.state.Left > 0 {
		a.holders = nil
		return
	}
	if a.holders != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.p.r.opts.BatchTimeout)
	defer cancel()
	h, err := a.p.store.Holders(ctx, a.id)
	if err != nil {
		a.p.r.log.Warn("red packet actor cannot read who holds its packets", "red_packet", a.id, "err", err)
		return
	}
	a.holders = h
}

// known answers a grab from memory when the cached state decides it. A
// keyed grab may retry one that took a packet, so only the script may
// answer it, unless the red packet does not exist.
func (a *redPacketActor) known(g *rpGrabMsg, now time.Time) (domain.RedPacketResult, bool) {
	st := a.state
	switch {
	case !st.Found:
		return domain.RedPacketResult{Code: domain.RedPacketNotFoundCode}, true
	case g.keyed:
		return domain.RedPacketResult{}, false
	case !st.ExpiresAt.IsZero() && !now.Before(st.ExpiresAt):
		return domain.RedPacketResult{Code: domain.RedPacketExpired}, true
	case !st.ExpiresAt.IsZero() && st.Left <= 0 && a.holders != nil:
		// A holder hears what the script would say: ALREADY_GRABBED
		// with their packet, not EMPTY.
		if cents, ok := a.holders[g.grab.UserID]; ok {
			return domain.RedPacketResult{Code: domain.RedPacketAlreadyGrabbed, AmountCents: cents}, true
		}
		return domain.RedPacketResult{Code: domain.RedPacketEmpty}, true
	}
	return domain.RedPacketResult{}, false
}

// flush sends up to BatchSize pending grabs through one script call off
// the actor's goroutine, unless one is in flight.
func (a *redPacketActor) flush(ctx actor.Context) {
	if a.inflight || len(a.pending) == 0 {
		return
	}
	n := min(len(a.pending), a.p.r.opts.BatchSize)
	batch := append([]*rpGrabMsg(nil), a.pending[:n]...)
	rest := copy(a.pending, a.pending[n:])
	clear(a.pending[rest:])
	a.pending = a.pending[:rest]
	a.inflight = true
	batchSize.Observe(float64(len(batch)))
	self := ctx.Self()
	go func() {
		out, err := a.p.run(a.id, batch)
		a.p.r.system.Root.Send(self, &rpBatchDone{batch: batch, out: out, err: err})
	}()
}

func (a *redPacketActor) onBatch(ctx actor.Context, d *rpBatchDone) {
	a.inflight = false
	if d.err != nil {
		a.p.r.trouble.failedOf("red packet grab batch failed", "red_packet", a.id, d.err, "grabs", len(d.batch))
		for _, g := range d.batch {
			a.answer(g, domain.RedPacketResult{Code: domain.RedPacketUnavailable})
		}
	} else if !d.out.State.Found && !a.state.ExpiresAt.IsZero() {
		// Redis lost the red packet, or the refund removed it: loaded
		// again, the batch goes out again (nothing of it was granted);
		// past its expiry, the batch is EXPIRED, as is every grab after.
		if !a.reloaded(d.batch) {
			code := domain.RedPacketNotFoundCode
			if a.state.Found {
				code = domain.RedPacketExpired
			}
			for _, g := range d.batch {
				a.answer(g, domain.RedPacketResult{Code: code})
			}
		}
	} else {
		a.p.r.trouble.okOf("red packet grab batch failed", "red_packet", a.id)
		a.state = d.out.State
		a.ref.unknown.Store(!a.state.Found)
		for i, g := range d.batch {
			a.answer(g, d.out.Results[i])
		}
		a.readHolders()
	}
	now := time.Now()
	keep := a.pending[:0]
	for _, g := range a.pending {
		if res, ok := a.known(g, now); ok {
			a.answer(g, res)
		} else {
			keep = append(keep, g)
		}
	}
	clear(a.pending[len(keep):])
	a.pending = keep
	a.flush(ctx)
}

// reloaded loads the red packet again after Redis lost it and, if it is
// found and not expired, puts batch back in front of the pending grabs.
func (a *redPacketActor) reloaded(batch []*rpGrabMsg) bool {
	a.activate(true)
	if !a.state.Found || a.state.ExpiresAt.IsZero() || !time.Now().Before(a.state.ExpiresAt) {
		return false
	}
	a.pending = append(batch, a.pending...)
	return true
}

func (a *redPacketActor) answer(g *rpGrabMsg, res domain.RedPacketResult) {
	g.reply <- res // buffered: never blocks
	g.ref.queued.Add(-1)
	a.p.r.load.queued.Add(-1)
}

// run sends a batch through the grab script under the router's deadlines,
// retrying a failed call (the script is idempotent per user and request).
func (p *RedPackets) run(id int64, batch []*rpGrabMsg) (domain.RedPacketBatch, error) {
	if h := p.r.opts.Redis; h != nil && !h.Usable() {
		return domain.RedPacketBatch{}, errRedisDown
	}
	grabs := make([]domain.RedPacketGrab, len(batch))
	for i, g := range batch {
		grabs[i] = g.grab
	}
	batchCtx, cancel := context.WithTimeout(context.Background(), min(p.r.opts.BatchTimeout, p.r.opts.GrabTimeout))
	defer cancel()
	for attempt := 1; ; attempt++ {
		ctx, cancelCall := context.WithTimeout(batchCtx, p.r.opts.CallTimeout)
		out, err := p.store.Grab(ctx, id, grabs)
		cancelCall()
		if err == nil || attempt >= p.r.opts.Attempts || batchCtx.Err() != nil {
			return out, err
		}
		select {
		case <-batchCtx.Done():
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
}

// errRedisDown fails a batch while the breaker keeps grabs off Redis.
var errRedisDown = redisDownError{}

type redisDownError struct{}

func (redisDownError) Error() string { return "redis is down (circuit breaker open)" }
