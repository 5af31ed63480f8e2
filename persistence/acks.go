package persistence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	// AOF, when set, makes the acknowledgement also cover the fsync of
	// the primary's and the replicas' append-only files where the primary
	// offers it (WAITAOF); nil: WAIT alone.
	AOF *AOFAcks
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
	t = cmp.Or(t, AckTimeoutDefault)
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
	wait *pendingAck // nil without acknowledgements
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

// AOFAcks is whether the primary offers fsync acknowledgements: WAITAOF
// (Redis 7.2 and later) with appendonly yes, as INFO server and
// persistence say. It is learned on the connection that runs the scripts,
// queued with a batch's script and WAIT, at its first call and again
// every aofRelearn: a Sentinel failover to a server of another version or
// configuration is seen within that time. Until it is learned, and while
// the primary lacks it, the batch waits with WAIT; a WAITAOF the primary
// refuses (an older server promoted, appendonly turned off) leaves its
// batch undecided, and the next batches use WAIT until it is learned again.
type AOFAcks struct {
	mu      sync.Mutex
	use     bool
	learned time.Time // zero: learn at the next call
}

// aofRelearn is how often AOFAcks asks the primary again.
const aofRelearn = 10 * time.Second

// plan says whether the next batch uses WAITAOF and whether it asks INFO.
func (c *AOFAcks) plan() (useAOF, learn bool) {
	if c == nil {
		return false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Until an answer comes every batch asks: a batch whose EVALSHA found
	// no script is sent again, and its first INFO's answer is not read.
	return c.use, c.learned.IsZero() || time.Since(c.learned) >= aofRelearn
}

// learn takes INFO server and persistence's answer.
func (c *AOFAcks) learn(info string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.use, c.learned = offersWaitAOF(info), time.Now()
}

// refused is a WAITAOF the primary refused: WAIT until learned again.
func (c *AOFAcks) refused() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.use, c.learned = false, time.Time{}
}

// offersWaitAOF says whether INFO's answer is of a server with WAITAOF
// (redis_version 7.2 or later) whose append-only file is on.
func offersWaitAOF(info string) bool {
	var version string
	aof := false
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "redis_version":
			version = v
		case "aof_enabled":
			aof = v == "1"
		}
	}
	major, rest, _ := strings.Cut(version, ".")
	minor, _, _ := strings.Cut(rest, ".")
	maj, err1 := strconv.Atoi(major)
	mnr, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return false
	}
	return aof && (maj > 7 || maj == 7 && mnr >= 2)
}

// pendingAck is the acknowledgement queued behind a script: WAIT or
// WAITAOF, and INFO when the capability is being learned.
type pendingAck struct {
	wait *redis.IntCmd      // WAIT Replicas timeout
	aof  *redis.IntSliceCmd // WAITAOF 1 Replicas timeout
	info *redis.StringCmd
}

// queueWait queues WAIT Replicas timeout on pipe, or WAITAOF 1 Replicas
// timeout where the primary offers it (go-redis's Pipeliner has neither).
func (a Acks) queueWait(ctx context.Context, pipe redis.Pipeliner, t time.Duration) *pendingAck {
	useAOF, learn := a.AOF.plan()
	p := &pendingAck{}
	if useAOF {
		p.aof = redis.NewIntSliceCmd(ctx, "waitaof", 1, a.Replicas, t.Milliseconds())
		_ = pipe.Process(ctx, p.aof)
	} else {
		p.wait = redis.NewIntCmd(ctx, "wait", a.Replicas, t.Milliseconds())
		_ = pipe.Process(ctx, p.wait)
	}
	if learn {
		p.info = redis.NewStringCmd(ctx, "info", "server", "persistence")
		_ = pipe.Process(ctx, p.info)
	}
	return p
}

// check says whether the script's writes were acknowledged: nil without
// acknowledgements, else ErrNotAcknowledged (or WAIT's own failure) when
// fewer replicas than required hold them, or, with WAITAOF, when the
// primary's or fewer replicas' append-only files than required have not
// fsynced them. Call it only after the script succeeded: its writes were
// made, so no error here is domain.ErrNotSent.
func (r ackedScript) check() error {
	p := r.wait
	if p == nil {
		return nil
	}
	err := r.checkWait(p)
	switch {
	case err == nil:
		ackWaits.WithLabelValues("acknowledged").Inc()
	case errors.Is(err, ErrNotAcknowledged):
		ackWaits.WithLabelValues("short").Inc()
	default:
		ackWaits.WithLabelValues("failed").Inc()
	}
	return err
}

// checkWait is check's answer for the acknowledgement p queued.
func (r ackedScript) checkWait(p *pendingAck) error {
	if p.info != nil {
		if info, err := p.info.Result(); err == nil {
			r.acks.AOF.learn(info)
		}
	}
	if p.aof != nil {
		return r.checkAOF(p.aof)
	}
	n, err := p.wait.Result()
	switch {
	case err != nil:
		return fmt.Errorf("wait for %d replicas: %w", r.acks.Replicas, err)
	case n < int64(r.acks.Replicas):
		return fmt.Errorf("%w: %d of %d replicas", ErrNotAcknowledged, n, r.acks.Replicas)
	}
	return nil
}

// checkAOF is check for a batch acknowledged with WAITAOF, whose reply is
// the count of fsynced local files (0 or 1) and of fsynced replicas.
func (r ackedScript) checkAOF(cmd *redis.IntSliceCmd) error {
	n, err := cmd.Result()
	switch {
	case err != nil && (redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "WAITAOF")):
		// An older primary, or appendonly turned off: the writes were
		// made but not acknowledged; later batches use WAIT.
		r.acks.AOF.refused()
		return fmt.Errorf("%w: the primary refused WAITAOF: %v", ErrNotAcknowledged, err)
	case err != nil:
		return fmt.Errorf("waitaof for the primary and %d replicas: %w", r.acks.Replicas, err)
	case len(n) != 2:
		return fmt.Errorf("waitaof answered %v", n)
	case n[0] < 1 || n[1] < int64(r.acks.Replicas):
		return fmt.Errorf("%w: fsynced by %d of 1 primary and %d of %d replicas", ErrNotAcknowledged, n[0], n[1], r.acks.Replicas)
	}
	return nil
}
