package actors

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// What the two sequencers (a voucher segment's actor, a red packet's
// actor) share: one passivation rule, run by the router's one scanner,
// and one wait for a grab's answer.

// queuedMsg is a grab a sequencer's actor holds until it answers it: it
// records the handle whose count of queued grabs its answer lowers.
type queuedMsg interface{ queuedOn(ref *voucherRef) }

func (g *grabMsg) queuedOn(ref *voucherRef) { g.ref = ref }

// sendTo is both sequencers' registry: it enqueues msg for key's actor in
// refs, spawning it (spawn, given the new handle) when there is none and
// fewer than MaxActors run, and refuses once the router drains. The
// lookup and the enqueue happen under mu, the lock passivation and forget
// take for writing, so that an actor taken out of refs (its own poison
// pill queued) receives nothing after it.
func sendTo[K comparable](r *Router, mu *sync.RWMutex, refs map[K]*voucherRef, key K, msg queuedMsg, spawn func(*voucherRef) *actor.PID) bool {
	mu.RLock()
	if ref := refs[key]; ref != nil {
		ok := !r.closed.Load() && r.enqueue(ref, msg)
		mu.RUnlock()
		return ok
	}
	mu.RUnlock()
	mu.Lock()
	defer mu.Unlock()
	if r.closed.Load() {
		return false
	}
	ref := refs[key]
	if ref == nil {
		if len(refs) >= r.opts.MaxActors {
			actorsFull.Inc()
			return false
		}
		ref = &voucherRef{}
		ref.pid = spawn(ref)
		refs[key] = ref
	}
	return r.enqueue(ref, msg)
}

// enqueue sends msg to ref's actor unless that actor already holds
// QueueBound grabs sent and not yet answered: the bounded queue is a
// count, not a bounded mailbox (protoactor's block or drop silently).
func (r *Router) enqueue(ref *voucherRef, msg queuedMsg) bool {
	if ref.queued.Add(1) > int64(r.opts.QueueBound) {
		ref.queued.Add(-1)
		return false
	}
	r.load.queued.Add(1)
	ref.lastUsed.Store(time.Now().UnixNano())
	msg.queuedOn(ref)
	r.system.Root.Send(ref.pid, msg)
	return true
}

// passivateIdle stops, and removes from refs, the actors idle for idle
// (an unknown id's after min(unknownIdle, idle)) that hold no grab queued
// or in flight. The caller holds the lock every send takes, so no grab can
// reach a stopped actor. (Not protoactor's ReceiveTimeout: its timer races
// with the mailbox under -race.) It returns how many actors are left.
func passivateIdle[K comparable](root *actor.RootContext, refs map[K]*voucherRef, now time.Time, idle time.Duration) int {
	cutoff := now.Add(-idle).UnixNano()
	unknownCutoff := now.Add(-min(unknownIdle, idle)).UnixNano()
	for k, ref := range refs {
		since := cutoff
		if ref.unknown.Load() {
			since = unknownCutoff
		}
		if ref.queued.Load() == 0 && ref.lastUsed.Load() < since {
			delete(refs, k)
			root.Poison(ref.pid)
		}
	}
	return len(refs)
}

// awaitAnswer waits for a grab's answer on reply for up to timeout, or
// until the caller gives up. Then a grab that abandon takes back (it never
// left this node, and now never will) is answered unavailable: the truth,
// and a retry finds no hidden sale; so is a caller that is gone. A grab in
// a script call whose outcome is not known yet is waited for, as its call
// is bounded, rather than answered unavailable when it may have sold; the
// bound of twice timeout more only guards against a bug (lost hears of
// it): a caller must never hang.
func awaitAnswer[T any](ctx context.Context, reply <-chan T, timeout time.Duration, abandon func() bool, unavailable T, lost func()) T {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case res := <-reply:
		return res
	case <-ctx.Done():
	case <-timer.C:
	}
	if abandon() || ctx.Err() != nil {
		return unavailable
	}
	late := time.NewTimer(2 * timeout)
	defer late.Stop()
	select {
	case res := <-reply:
		return res
	case <-late.C:
		lost()
		return unavailable
	}
}

// survive is deferred by a sequencer's Receive: a panic in its handler (a
// bug) is logged at ERROR with its stack and counted, and retire stops
// the actor, so that its grabs go to a new activation. Left to
// protoactor, the actor would be restarted on the same struct, with the
// state the panic left (a batch in flight, a stale fence), and stopped
// for good after ten panics in ten seconds while the router still sent
// it grabs: each then waited out its deadline and answered UNAVAILABLE.
func survive(log *slog.Logger, kind string, id int64, msg any, retire func()) {
	v := recover()
	if v == nil {
		return
	}
	actorPanics.WithLabelValues(kind).Inc()
	log.Error("actor panicked; stopping it", "kind", kind, "id", id, "message", fmt.Sprintf("%T", msg), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	defer func() {
		if v := recover(); v != nil {
			log.Error("actor panicked while stopping", "kind", kind, "id", id, "panic", fmt.Sprint(v))
		}
	}()
	retire()
}

// troubleLog logs a voucher's trouble once per change of state, not once
// per grab or batch: while Redis fails over, or refuses to sell, every
// grab of a voucher fails alike, and a line each (a thousand a second)
// buries the one that says what happened. The first failure of a kind
// for a voucher is a WARN with its error; the rest are counted; the first
// success after it is an INFO that says how many failed meanwhile.
type troubleLog struct {
	log *slog.Logger
	// open counts the troubles logged and not yet over: zero, as it is
	// nearly always, lets ok return without the lock.
	open atomic.Int32
	mu   sync.Mutex
	m    map[trouble]int
}

// trouble is one kind of failure of one voucher.
type trouble struct {
	what    string
	voucher int64
}

func newTroubleLog(log *slog.Logger) *troubleLog {
	return &troubleLog{log: log, m: map[trouble]int{}}
}

// failed records a failure of what for the voucher: a WARN the first time
// since the last success, else a count.
func (l *troubleLog) failed(what string, voucher int64, err error, args ...any) {
	l.failedOf(what, "voucher", voucher, err, args...)
}

// failedOf is failed for a thing of another kind (a red packet), named in
// the log by idName.
func (l *troubleLog) failedOf(what, idName string, id int64, err error, args ...any) {
	k := trouble{what, id}
	l.mu.Lock()
	n, seen := l.m[k]
	l.m[k] = n + 1
	if !seen {
		l.open.Add(1)
	}
	l.mu.Unlock()
	if !seen {
		l.log.Warn(what+" (logged once until it succeeds again)", append([]any{idName, id, "err", err}, args...)...)
		return
	}
	if l.log.Enabled(context.Background(), slog.LevelDebug) { // no allocation per failed grab at the usual levels
		l.log.Debug(what+" again", append([]any{idName, id, "err", err, "failures", n + 1}, args...)...)
	}
}

// ok records a success of what for the voucher: an INFO if it had failed.
func (l *troubleLog) ok(what string, voucher int64) { l.okOf(what, "voucher", voucher) }

// okOf is ok for a thing of another kind, named in the log by idName.
func (l *troubleLog) okOf(what, idName string, id int64) {
	if l.open.Load() == 0 {
		return
	}
	k := trouble{what, id}
	l.mu.Lock()
	n, seen := l.m[k]
	if seen {
		delete(l.m, k)
		l.open.Add(-1)
	}
	l.mu.Unlock()
	if seen {
		l.log.Info(what+": succeeds again", idName, id, "failures", n)
	}
}

// loadMeter is the node's grab load as the GraphQL layer's load shedder
// reads it: how many grabs wait for an answer on this node, and how long
// grabs took lately. Both are kept with atomics on the grab path (one add
// per enqueue and answer, one compare-and-swap per grab) so that reading
// them costs the shedder nothing and the hot path next to nothing.
type loadMeter struct {
	queued atomic.Int64
	// latency is an exponentially weighted moving average of grab
	// durations in nanoseconds; observed is when the last grab ended, so
	// that an old average does not keep the node "slow" once grabs stop.
	latency  atomic.Int64
	observed atomic.Int64
}

// latencyWeight is the weight of the newest grab in the average (1/8):
// a few hundred grabs a second move it within tens of milliseconds,
// while one slow grab does not.
const latencyWeight = 8

// latencyStale is how long an average stays meaningful without a new
// grab: after it, the node reports no latency (the queue depth still
// shows grabs that are stuck rather than finished).
const latencyStale = time.Second

func (m *loadMeter) observe(d time.Duration, now time.Time) {
	for {
		old := m.latency.Load()
		next := old + (int64(d)-old)/latencyWeight
		if old == 0 {
			next = int64(d)
		}
		if m.latency.CompareAndSwap(old, next) {
			break
		}
	}
	m.observed.Store(now.UnixNano())
}

// Load reports the grabs waiting for an answer on this node (queued in a
// voucher actor or in a script call) and the recent average duration of a
// grab, zero when no grab ended in the last second. The GraphQL layer
// sheds non-core operations while either is over its threshold.
func (r *Router) Load() (queued int, latency time.Duration) {
	if time.Since(time.Unix(0, r.load.observed.Load())) <= latencyStale {
		latency = time.Duration(r.load.latency.Load())
	}
	return int(r.load.queued.Load()), latency
}

// Answered counts the grabs this router has answered since it started;
// the shutdown log reports how many were answered while draining.
func (r *Router) Answered() uint64 { return r.answered.Load() }
