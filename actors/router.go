// Package actors sequences grabs. Each seckill voucher has one actor (spawned
// on first use, passivated when idle) that drains its mailbox in batches and
// runs each batch through ONE fenced Lua script call, answering what it
// already knows (sold out, not started, ended, paused, unknown) from memory
// with no Redis call at all. An actor is a sequencer and a cache, never the
// authority: stock truth is Redis, and a superseded activation is refused
// inside the script.
package actors

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"flashsale/domain"
	"flashsale/internal/tracing"
)

// Store is the Redis side of grabbing: it claims an activation's fencing
// token and runs a batch through the grab script (persistence.Grabs, built
// by node). Declared here in domain types, so that actors needs no storage
// package and a test can stand in for Redis.
//
// A voucher's grabs are spread over its segments, so that one hot voucher
// is not bound to one actor's throughput: each segment is an actor
// identity of its own with its own fencing token, and every segment sells
// from the voucher's one stock.
type Store interface {
	Claim(ctx context.Context, voucherID int64, seg int) (int64, domain.VoucherState, error)
	// Refence claims a new fence only while fence is still the newest
	// (superseded otherwise, with nothing written).
	Refence(ctx context.Context, voucherID int64, seg int, fence int64) (newFence int64, st domain.VoucherState, superseded bool, err error)
	State(ctx context.Context, voucherID int64) (domain.VoucherState, error)
	Grab(ctx context.Context, voucherID int64, seg int, fence int64, grabs []domain.Grab) (domain.BatchOutcome, error)
}

// Leases hands out the Redlock lease that a segment's activation holds
// while it serves (lease.Redlock, built by node): with it, two members
// never serve one segment at once while the lease holds, and the fencing
// token in the script covers the moment a lease lapses unnoticed.
type Leases interface {
	// Acquire takes the named lease, trying until ctx ends.
	Acquire(ctx context.Context, name string) (Lease, error)
}

// Lease is one held lease.
type Lease interface {
	// Extend renews the lease for another TTL; an error means it may be
	// lost, and the holder must stop serving.
	Extend(ctx context.Context) error
	Release(ctx context.Context)
	// TTL is how long the lease lasts without an extension.
	TTL() time.Duration
}

// OrderIDs hands out order ids in bulk (persistence.OrderIDs).
type OrderIDs interface {
	Take(ctx context.Context, n int) ([]int64, error)
}

// Preheater loads a voucher Redis does not know from the database
// (catalog.Service); found is false for an id that is no seckill voucher.
type Preheater interface {
	EnsurePreheated(ctx context.Context, voucherID int64) (found bool, err error)
}

// Limits admits grabs under the rate limits shared in Redis
// (persistence.RateLimits: per voucher, per client IP), one pipelined
// round trip per batch.
type Limits interface {
	Enabled() bool
	Admit(ctx context.Context, voucherID int64, checks []domain.RateCheck) ([]time.Duration, error)
}

// RedisHealth says whether grabs may use Redis now (breaker.Breaker).
type RedisHealth interface {
	// Usable is false while the breaker is not closed, and while the node
	// re-syncs Redis from the database after an outage.
	Usable() bool
	// Epoch changes at every outage: a state read between two equal
	// epochs while Usable came from a Redis that was not re-synced meanwhile.
	Epoch() uint64
}

// Fallback sells grabs from the database while Redis is down
// (persistence.DBGrabs, with DEGRADE_TO_DB). view is what this
// activation last knew of Redis (the stock it says is left, and when it
// was read); sold reports a new sale.
type Fallback interface {
	Grab(ctx context.Context, voucherID int64, view domain.RedisView, g domain.Grab) (res domain.GrabResult, sold bool, err error)
}

// Options tunes the router; zero values take the defaults.
type Options struct {
	// BatchSize caps the grabs of one script call.
	BatchSize int
	// QueueBound caps the grabs waiting for one voucher; past it a grab is
	// answered UNAVAILABLE at once instead of queueing without end.
	QueueBound int
	// GrabTimeout bounds how long a caller waits for its answer.
	GrabTimeout time.Duration
	// CallTimeout bounds one script call; Attempts is how many times a
	// batch is tried (the script is idempotent per request id, so a retry
	// after a lost reply never sells twice).
	CallTimeout time.Duration
	Attempts    int
	// BatchTimeout bounds a whole batch (rate limits, ids, every attempt):
	// the callers whose grabs are in it wait for it, and a stalled Redis
	// must cost them at most this.
	BatchTimeout time.Duration
	// Redis, if set, says when Redis is down: grabs are then not sent to
	// it but answered UNAVAILABLE, or sold by Fallback if set.
	Redis    RedisHealth
	Fallback Fallback
	// IdleTimeout passivates an actor that has had no grab for this long.
	IdleTimeout time.Duration
	// MaxActors caps the voucher actors of this node; a grab that would
	// start one more is answered UNAVAILABLE. Grabs of random ids each
	// start an actor (to learn the id is unknown), so without a cap a
	// flood of them would grow memory without bound.
	MaxActors int
	// Limits, if set, rate-limits the grabs that reach Redis (those
	// answered from memory cost nothing and are not limited) by the limits
	// shared in Redis: per voucher and per client IP.
	Limits Limits
	// UserRate, if positive, is the grabs per second each user may make
	// for a voucher (RATE_USER_PER_SEC), counted in the memory of the
	// user's segment activation (see userRates); like Limits, it applies
	// to the grabs that reach Redis.
	UserRate int
	// Sold, if set, is told the voucher after every batch that sold a
	// unit (live.Service.Sold, which coalesces its announcements). It
	// runs on the actor and must not block.
	Sold func(voucherID int64)
	// Leases, if set, makes every segment activation hold a lease (see
	// Leases); LeaseWait bounds how long an activation waits for a lease
	// another member holds (default: the lease's TTL and a second).
	Leases    Leases
	LeaseWait time.Duration
	// Tracer, if set, traces each grab batch as a span that links the
	// grabs it carries (see batchSpan); Carry, if set, is handed the span
	// context of each grab that sold, for the order writer's batch to
	// link. Nil: no span, and nothing kept per grab.
	Tracer trace.Tracer
	Carry  *tracing.Carry
	// Meters, if set, turns on protoactor's own metrics in the router's
	// actor system (ACTOR_METRICS): protoactor takes it as the global
	// MeterProvider.
	Meters metric.MeterProvider
}

// Defaults of Options, exported for the configuration's defaults.
const (
	BatchSizeDefault   = 256
	QueueBoundDefault  = 8192
	GrabTimeoutDefault = 5 * time.Second
	// CallTimeoutDefault and BatchTimeoutDefault keep a grab's answer
	// within 500 ms when Redis stalls, rather than holding it for as long
	// as Redis does: a batch's script call takes a few milliseconds when
	// Redis answers.
	CallTimeoutDefault  = 200 * time.Millisecond
	BatchTimeoutDefault = 400 * time.Millisecond
	// LeaseWaitDefault covers the default segment lease (3 s) lapsing
	// after its holder died, within GrabTimeoutDefault.
	LeaseWaitDefault = 4 * time.Second
)

func (o Options) withDefaults() Options {
	o.BatchSize = cmp.Or(o.BatchSize, BatchSizeDefault)
	o.QueueBound = cmp.Or(o.QueueBound, QueueBoundDefault)
	o.GrabTimeout = cmp.Or(o.GrabTimeout, GrabTimeoutDefault)
	o.CallTimeout = cmp.Or(o.CallTimeout, CallTimeoutDefault)
	o.BatchTimeout = cmp.Or(o.BatchTimeout, BatchTimeoutDefault)
	o.Attempts = cmp.Or(o.Attempts, 3)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, 2*time.Minute)
	o.LeaseWait = cmp.Or(o.LeaseWait, LeaseWaitDefault)
	o.MaxActors = cmp.Or(o.MaxActors, 10_000)
	return o
}

// Router owns the voucher actors of this node and routes each grab to its
// voucher's actor.
type Router struct {
	system *actor.ActorSystem
	// cluster, if set, places each segment on one member (see Cluster):
	// grabs of a segment another member hosts are sent to it.
	cluster   *Cluster
	store     Store
	ids       OrderIDs
	preheater Preheater
	opts      Options
	log       *slog.Logger
	trouble   *troubleLog // a voucher's failures, once per change

	reqPrefix string
	reqSeq    atomic.Uint64

	load loadMeter // see Load
	// answered counts grabs answered since start, for the shutdown log.
	answered atomic.Uint64

	// segments caches each voucher's segment count (int64 -> int), as
	// this node's activations and other members' replies report it.
	segments sync.Map

	// ledger is what the node knows for sure of its vouchers' Redis
	// stock, for the database fallback.
	ledger *nodeLedger

	mu       sync.RWMutex
	vouchers map[segKey]*voucherRef
	// redPackets are the red-packet sequencers on this router, whose
	// actors its scanner passivates too.
	redPackets []*RedPackets
	closed     atomic.Bool // no new grabs (Drain sets it under mu)
	started    bool        // Start ran: the scanner runs
	stopped    bool        // Stop ran

	stop chan struct{}
	done chan struct{}
}

// segKey names one segment of one voucher: one actor identity.
type segKey struct {
	voucher int64
	seg     int
}

// identity is the segment's cluster identity.
func (k segKey) identity() string {
	return strconv.FormatInt(k.voucher, 10) + "/" + strconv.Itoa(k.seg)
}

// leaseName is the name of the segment's lease. It carries the voucher's
// hash tag, so that on a Redis Cluster the lease lives on the voucher's
// own shard: another shard failing over never takes a voucher's lease
// away (its activation would stop, and the next wait for the failover).
func (k segKey) leaseName() string {
	return "seg:{v" + strconv.FormatInt(k.voucher, 10) + "}/" + strconv.Itoa(k.seg)
}

// voucherRef is the router's handle on one activation.
type voucherRef struct {
	pid *actor.PID
	// queued counts grabs sent and not yet answered (the mailbox bound).
	queued atomic.Int64
	// lastUsed is the unix nanosecond of the last grab (for passivation).
	lastUsed atomic.Int64
	// unknown marks an activation for an id that is no seckill voucher:
	// passivated after unknownIdle rather than IdleTimeout, so that
	// grabbing random ids cannot pile up actors.
	unknown atomic.Bool
}

// unknownIdle is how long an actor for an unknown id is kept: long enough
// to absorb a burst of grabs of a mistyped id, short enough to stay small.
const unknownIdle = 5 * time.Second

// NewRouter returns a router with its own actor system; it starts no
// goroutine of its own. Start runs its passivation scanner; Stop stops
// it.
func NewRouter(store Store, ids OrderIDs, preheater Preheater, log *slog.Logger, opts Options) *Router {
	config := []actor.ConfigOption{actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return protoactorLogger(log)
	})}
	if opts.Meters != nil {
		config = append(config, actor.WithMetricProviders(opts.Meters))
	}
	r := &Router{
		system: actor.NewActorSystem(config...),
		store:  store, ids: ids, preheater: preheater, opts: opts.withDefaults(), log: log,
		reqPrefix: randomPrefix(),
		vouchers:  map[segKey]*voucherRef{},
		ledger:    newNodeLedger(),
		trouble:   newTroubleLog(log),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	return r
}

// Start runs the router's passivation scanner (passivate) until Stop:
// without it, idle actors are never stopped.
func (r *Router) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return nil
	}
	r.started = true
	go r.passivate()
	return nil
}

// ActorSystem is the node's actor system: the persistence actors are
// spawned in it, so that they start and stop with the node's actors.
func (r *Router) ActorSystem() *actor.ActorSystem { return r.system }

func randomPrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b) + ":"
}

// Grab tries to take one unit of a voucher for a user. Business outcomes
// are codes; UNAVAILABLE means the grab was shed or Redis could not be
// reached in time, and is safe to retry; RATE_LIMITED carries RetryAfter.
func (r *Router) Grab(ctx context.Context, req domain.GrabRequest) domain.GrabResult {
	start := time.Now()
	res := r.grab(ctx, req)
	now := time.Now()
	r.load.observe(now.Sub(start), now)
	r.answered.Add(1)
	countGrab(res.Code, now.Sub(start))
	return res
}

func (r *Router) grab(ctx context.Context, req domain.GrabRequest) domain.GrabResult {
	key := segKey{voucher: req.VoucherID, seg: SegmentOf(req.UserID, r.segmentCount(req.VoucherID))}
	msg := &grabMsg{
		user:     req.UserID,
		ip:       req.ClientIP,
		req:      r.requestID(req),
		keyed:    req.RequestID != "",
		reply:    make(chan domain.GrabResult, 1),
		deadline: time.Now().Add(r.opts.GrabTimeout),
	}
	if r.opts.Tracer != nil {
		msg.span = trace.SpanFromContext(ctx)
	}
	if r.cluster != nil && !r.cluster.Local(key) {
		return r.cluster.forward(ctx, key, msg)
	}
	if !r.send(key, msg) {
		return domain.GrabResult{Code: domain.SeckillUnavailable}
	}
	return awaitAnswer(ctx, msg.reply, r.opts.GrabTimeout, msg.abandon, domain.GrabResult{Code: domain.SeckillUnavailable}, func() {
		r.log.Error("grab in flight got no answer", "voucher", req.VoucherID, "user", req.UserID)
	})
}

// requestID is the id the grab script remembers a sale by. A client's key
// is scoped to its user ("u<user>:<key>"), so two users who pick the same
// key never share a sale; without a key each grab gets a fresh id from
// this node's random prefix (hex digits and a colon, never a "u").
func (r *Router) requestID(req domain.GrabRequest) string {
	if req.RequestID != "" {
		return "u" + strconv.FormatInt(req.UserID, 10) + ":" + req.RequestID
	}
	return r.reqPrefix + strconv.FormatUint(r.reqSeq.Add(1), 36)
}

// SegmentOf is the segment of a voucher with segs segments that a user's
// grabs go to: a hash of the user id (a multiplicative mix, so that
// consecutive ids spread evenly) modulo segs.
func SegmentOf(userID int64, segs int) int {
	if segs <= 1 {
		return 0
	}
	h := uint64(userID) * 0x9E3779B97F4A7C15
	h ^= h >> 29
	return int(h % uint64(segs))
}

// segmentCount is the voucher's segment count as this node knows it (1
// until an activation or a reply told it). A stale count only sends a
// grab to another segment than usual: every segment sells from the one
// stock and counts the one per-user limit, inside the one script.
func (r *Router) segmentCount(voucherID int64) int {
	if n, ok := r.segments.Load(voucherID); ok {
		return n.(int)
	}
	return 1
}

// learnSegments records a voucher's segment count.
func (r *Router) learnSegments(voucherID int64, n int) {
	if n < 1 {
		return
	}
	if cur, ok := r.segments.Load(voucherID); !ok || cur.(int) != n {
		r.segments.Store(voucherID, n)
	}
}

// send enqueues msg for the segment's actor, spawning it if needed (see
// sendTo).
func (r *Router) send(key segKey, msg *grabMsg) bool {
	return sendTo(r, &r.mu, r.vouchers, key, msg, func(ref *voucherRef) *actor.PID {
		a := &voucherActor{r: r, ref: ref, id: key.voucher, seg: key.seg, rates: newUserRates(r.opts.UserRate)}
		pid := r.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return a }))
		segmentsHosted.Set(float64(len(r.vouchers) + 1)) // this one is added as spawn returns
		return pid
	})
}

// forget drops ref if it is still the segment's current activation.
func (r *Router) forget(key segKey, ref *voucherRef) {
	r.mu.Lock()
	if r.vouchers[key] == ref {
		delete(r.vouchers, key)
		segmentsHosted.Set(float64(len(r.vouchers)))
	}
	r.mu.Unlock()
}

// Changed tells the voucher's actors on this node, if any, that the
// voucher changed outside the grab script (status, restock, cancellation,
// segments), so they reload what they cached.
func (r *Router) Changed(voucherID int64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for seg := range domain.MaxSegments {
		if ref := r.vouchers[segKey{voucherID, seg}]; ref != nil {
			r.system.Root.Send(ref.pid, reload{})
		}
	}
}

// Rehome retires every activation of a segment that owns reports this
// member no longer hosts (the cluster's membership changed): it releases
// its lease so that the new host can take it, and hands what it holds on.
func (r *Router) Rehome(owns func(segKey) bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for key, ref := range r.vouchers {
		if !owns(key) {
			r.system.Root.Send(ref.pid, moved{})
		}
	}
}

// Resync makes every actor reload: announcements may have been missed.
func (r *Router) Resync() {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, ref := range r.vouchers {
		r.system.Root.Send(ref.pid, reload{})
	}
}

// Active reports whether this node has a live activation for a segment
// of the voucher.
func (r *Router) Active(voucherID int64) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for seg := range domain.MaxSegments {
		if r.vouchers[segKey{voucherID, seg}] != nil {
			return true
		}
	}
	return false
}

// passivate is the router's one passivation scanner: it stops the
// voucher activations and the red-packet actors that have been idle for
// IdleTimeout (passivateIdle), until Stop.
func (r *Router) passivate() {
	defer close(r.done)
	tick := time.NewTicker(max(min(r.opts.IdleTimeout, unknownIdle)/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		r.mu.Lock()
		if before := len(r.vouchers); passivateIdle(r.system.Root, r.vouchers, now, r.opts.IdleTimeout) != before {
			segmentsHosted.Set(float64(len(r.vouchers)))
		}
		rps := r.redPackets
		r.mu.Unlock()
		for _, p := range rps {
			p.mu.Lock()
			passivateIdle(r.system.Root, p.actors, now, r.opts.IdleTimeout)
			p.mu.Unlock()
		}
	}
}

// Drain takes no new grabs (each is answered UNAVAILABLE) and waits until
// every actor has answered what it holds, up to GrabTimeout: a batch in
// flight must come back, or a grab that sold would be reported
// UNAVAILABLE. The actors keep running (Stop stops them), so that the
// order writer can drain, and websockets close, before they go.
func (r *Router) Drain() {
	r.mu.Lock()
	r.closed.Store(true)
	// Retiring actors delete from r.vouchers (forget) while Drain waits:
	// iterate a copy.
	refs := maps.Clone(r.vouchers)
	r.mu.Unlock()
	deadline := time.Now().Add(r.opts.GrabTimeout)
	for _, ref := range refs {
		for ref.queued.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// Stop drains the router (see Drain), then stops the scanner, the actors
// and the actor system (leaving the cluster, if it joined). Safe to
// repeat.
func (r *Router) Stop() {
	r.mu.Lock()
	stopped := r.stopped
	r.stopped = true
	r.mu.Unlock()
	if stopped {
		return
	}
	r.Drain()
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if started {
		close(r.stop)
		<-r.done
	}
	r.mu.Lock()
	refs := r.vouchers
	r.vouchers = map[segKey]*voucherRef{}
	r.mu.Unlock()
	for _, ref := range refs {
		_ = r.system.Root.PoisonFuture(ref.pid).Wait()
	}
	if r.cluster != nil {
		r.cluster.shutdown() // stops the actor system too
		return
	}
	r.system.Shutdown()
}
