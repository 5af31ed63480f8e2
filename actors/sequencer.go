package actors

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
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
