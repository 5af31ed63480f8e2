package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// What the two sequencers (a voucher segment's actor, a red packet's
// actor) share: one passivation rule, run by the router's one scanner,
// and one wait for a grab's answer.

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
