package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// Acks is how many replicas must hold a grab batch's writes before its
// answers are given (REDIS_ACK_REPLICAS), and how long a batch waits for
// them (REDIS_ACK_TIMEOUT). Redis replicates asynchronously: without
// acknowledgements a primary that dies right after answering OK can take
// the sale with it when a replica that never received it is promoted.
type Acks struct {
	Replicas int
	Timeout  time.Duration
}

// AckTimeoutDefault is REDIS_ACK_TIMEOUT's default.
const AckTimeoutDefault = 200 * time.Millisecond

// ackMargin is the time left, before the call's deadline, for everything
// but WAIT's own wait: a pooled connection (or a new one, dialled through
// the sentinels), the script, the replies. A WAIT still waiting at the
// deadline would count as a failed call in the circuit breaker, as if the
// primary had stalled (measured under the race detector on two busy
// cores: 50 ms was not always enough).
const ackMargin = 100 * time.Millisecond

// ErrNotAcknowledged is the error of a batch whose script ran on the
// primary but whose writes fewer replicas than required acknowledged in
// time. It is not domain.ErrNotSent: the batch may have sold, and a
// failover may still take those sales back, so its answers are undecided;
// a retry of the same request ids (the scripts are idempotent per request
// id) settles them once the replicas have caught up.
var ErrNotAcknowledged = errors.New("the batch's writes were not acknowledged by enough replicas in time")

// errNoTimeToAck is a call not sent because too little of its context's
// time is left to wait for the replicas: a batch's last retry, after its
// earlier attempts waited out theirs. Sent, it would end at the deadline,
// in the middle of its WAIT: a timeout, which the circuit breaker counts
// against the primary.
var errNoTimeToAck = fmt.Errorf("too little time left to wait for the replicas: %w", domain.ErrNotSent)

// AckRoom is the least time a call with acknowledgements needs besides
// its wait: with less left it is not sent.
const AckRoom = 2 * ackMargin

// wait returns WAIT's timeout for a call with ctx: Timeout, shortened to
// end ackMargin before ctx's deadline, and never 0, which WAIT takes as
// "forever"; ok is false when less than AckRoom is left.
func (a Acks) wait(ctx context.Context) (_ time.Duration, ok bool) {
	t := a.Timeout
	if t <= 0 {
		t = AckTimeoutDefault
	}
	if dl, has := ctx.Deadline(); has {
		left := time.Until(dl)
		if left < AckRoom {
			return 0, false
		}
		t = min(t, left-ackMargin)
	}
	return max(t, time.Millisecond), true
}

// ackedScript is a script call followed, when replicas must acknowledge
// it, by WAIT on the same connection in the same round trip (a pipeline):
// WAIT counts the replicas holding every write its connection made, the
// script's included.
type ackedScript struct {
	res  *redis.Cmd
	wait *redis.IntCmd // nil without acknowledgements
	acks Acks
}

// runAcked runs s with WAIT behind it when a.Replicas > 0 (EVALSHA, then
// EVAL when Redis lost the script); without acknowledgements it is s.Run.
// Its result's err is the script's alone: the caller decides, from what the
// script returned, whether the acknowledgement matters (see check).
func (a Acks) runAcked(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, keys []string, args ...any) ackedScript {
	if a.Replicas <= 0 {
		return ackedScript{res: s.Run(ctx, rdb, keys, args...)}
	}
	rdb, err := ackNode(ctx, rdb, keys[0])
	if err != nil {
		return notRun(ctx, err)
	}
	t, ok := a.wait(ctx)
	if !ok {
		return notRun(ctx, errNoTimeToAck)
	}
	pipe := rdb.Pipeline()
	res := s.EvalSha(ctx, pipe, keys, args...)
	wait := a.queueWait(ctx, pipe, t)
	_, _ = pipe.Exec(ctx)
	if redis.HasErrorPrefix(res.Err(), "NOSCRIPT") {
		if t, ok = a.wait(ctx); !ok {
			return notRun(ctx, errNoTimeToAck) // the script did not run
		}
		pipe = rdb.Pipeline()
		res = s.Eval(ctx, pipe, keys, args...)
		wait = a.queueWait(ctx, pipe, t)
		_, _ = pipe.Exec(ctx)
	}
	return ackedScript{res: res, wait: wait, acks: a}
}

// ackNode is the client a script on key and its WAIT go through: rdb,
// or on a Redis Cluster the primary that holds key's slot. A cluster
// pipeline sends a keyless WAIT to a node of go-redis's choosing, whose
// count says nothing of the replicas of the shard that ran the script.
// Should the slot move before the pipeline arrives, the node answers
// MOVED without running the script (see notSent).
func ackNode(ctx context.Context, rdb redis.UniversalClient, key string) (redis.UniversalClient, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb, nil
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("find the primary of %s: %w: %w", key, domain.ErrNotSent, err)
	}
	return node, nil
}

// notRun is a script call that was not sent, failing with err.
func notRun(ctx context.Context, err error) ackedScript {
	res := redis.NewCmd(ctx)
	res.SetErr(err)
	return ackedScript{res: res}
}

// queueWait queues WAIT Replicas timeout on pipe (go-redis's Pipeliner
// has no Wait method).
func (a Acks) queueWait(ctx context.Context, pipe redis.Pipeliner, t time.Duration) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", a.Replicas, t.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// check says whether the script's writes were acknowledged: nil without
// acknowledgements, else ErrNotAcknowledged (or WAIT's own failure) when
// fewer replicas than required hold them. Call it only after the script
// succeeded: its writes were made, so no error here is domain.ErrNotSent.
func (r ackedScript) check() error {
	if r.wait == nil {
		return nil
	}
	n, err := r.wait.Result()
	switch {
	case err != nil:
		return fmt.Errorf("wait for %d replicas: %w", r.acks.Replicas, err)
	case n < int64(r.acks.Replicas):
		return fmt.Errorf("%w: %d of %d replicas", ErrNotAcknowledged, n, r.acks.Replicas)
	}
	return nil
}
