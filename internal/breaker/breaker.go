// Package breaker is the circuit breaker in front of the request-path
// Redis client: a stalled Redis (process stopped, sockets open) answers
// nothing and closes nothing, so only deadlines end a call; the breaker
// then stops sending calls at all, so requests answer at once rather than
// each waiting out its deadline, probes Redis now and then (Prober), and
// re-syncs Redis from the database when it is back (Options.OnClose)
// before grabs use it again. The database fallback asks it whether Redis
// is down (persistence.RedisOutage), the actors whether Redis is usable
// (actors.RedisHealth).
package breaker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"flashsale/domain"
	"flashsale/internal/maintenance"
	"flashsale/internal/metrics"
)

// Defaults of the breaker.
const (
	// FailuresDefault consecutive failed calls open the breaker.
	FailuresDefault = 3
	// OpenDefault is how long the breaker stays open before it lets one
	// probe call through (half-open). Only the Prober's ping is let
	// through, so a short one costs a ping per period while Redis is away,
	// and finds a Redis that is back (a promoted replica, a restarted
	// server) within about this plus the probe interval.
	OpenDefault = 200 * time.Millisecond
)

// ErrRedisUnavailable is returned, without a call to Redis, while the
// breaker is open (or half-open with its probe under way).
// It wraps domain.ErrNotSent: such a call cannot have changed anything.
var ErrRedisUnavailable = fmt.Errorf("redis unavailable (circuit breaker open): %w", domain.ErrNotSent)

var breakerState = metrics.GaugeVec("breaker_state", "Circuit breaker state per store: 0 closed, 1 half-open, 2 open.", "store")

var breakerTrips = metrics.CounterVec("breaker_trips_total", "Times the circuit breaker opened per store from closed: each an outage, a span in which Redis was taken to be down.", "store")

// Options tunes a Breaker; zero values take the defaults.
type Options struct {
	Failures int
	Open     time.Duration
	// OnClose runs (in a goroutine of its own) each time the breaker closes
	// again after an outage, again while it fails; Usable is false until
	// it succeeded, so that no grab uses Redis before it is re-synced (see
	// the database fallback). Its context ends at Close.
	OnClose func(ctx context.Context) error
}

// Breaker is a circuit breaker around the request-path Redis client,
// installed as a go-redis hook so that every command and pipeline of that
// client goes through it. Redis's own replies (redis.Nil, script errors)
// count as successes: Redis answered. Timeouts, refused connections and
// pool timeouts count as failures; a caller's cancellation counts as a
// success (gobreaker 2.1 has no third outcome), which can only delay an
// opening: while the breaker is not closed, only the Prober's ping reaches
// Redis (see run).
//
// On a Redis Cluster it keeps one circuit per node instead (NodeHook): a
// shard that fails over opens its own, and the other shards' calls go on.
// Usable, Down and Epoch speak for all circuits together.
type Breaker struct {
	cb       *gobreaker.CircuitBreaker[struct{}] // the client-wide circuit
	settings gobreaker.Settings
	log      *slog.Logger
	// nodes are a cluster's circuits, by node address: read at each call
	// (a node's hook finds the node's circuit there, so that one made
	// after a drop replaces the dropped one), changed under mu.
	nodes sync.Map // string -> *circuit
	// states holds each circuit's last state ("" for the client-wide one),
	// as changed saw it: read without any circuit's lock.
	states sync.Map // string -> gobreaker.State
	// Masters, if set (a cluster), lists the nodes that serve slots as
	// primaries now: the probe drops the circuits of the others.
	Masters func(ctx context.Context) ([]string, error)
	// Dropped, if set, runs (on the probe's goroutine) when the probe
	// finds nodes with open circuits that no longer serve slots (the
	// cluster's primaries changed: a failover ended), before it drops
	// their circuits and before the re-sync that may start.
	Dropped func(ctx context.Context)
	onClose func(ctx context.Context) error
	// resyncing counts the OnClose runs under way: from the moment the
	// breaker closes after an outage until the re-sync succeeded.
	resyncing atomic.Int32
	// epoch counts the times the breaker left the closed state.
	epoch atomic.Uint64
	// ctx ends at Close; resyncs holds the re-sync goroutines, which Close
	// waits for. closed (under mu) keeps a state change after Close from
	// starting another.
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	closed  bool
	resyncs sync.WaitGroup
}

// New returns a breaker for the stock Redis.
func New(log *slog.Logger, opts Options) *Breaker {
	opts.Failures = cmp.Or(opts.Failures, FailuresDefault)
	opts.Open = cmp.Or(opts.Open, OpenDefault)
	b := &Breaker{log: log, onClose: opts.OnClose}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.settings = gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1,
		Timeout:     opts.Open,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(opts.Failures) },
		IsSuccessful: func(err error) bool {
			var reply redis.Error
			return err == nil || errors.As(err, &reply) || errors.Is(err, context.Canceled)
		},
	}
	b.cb = b.newCircuit("", nil)
	breakerState.WithLabelValues("redis").Set(0)
	return b
}

// circuit is one node's breaker on a cluster, with the node's client for
// the probe.
type circuit struct {
	cb   *gobreaker.CircuitBreaker[struct{}]
	node *redis.Client
}

// newCircuit makes the circuit of addr ("" and a nil c for the
// client-wide one; c is the node's, whose cb it is).
func (b *Breaker) newCircuit(addr string, c *circuit) *gobreaker.CircuitBreaker[struct{}] {
	st := b.settings
	if addr != "" {
		st.Name = "redis " + addr
	}
	st.OnStateChange = func(_ string, from, to gobreaker.State) {
		if c != nil {
			if cur, ok := b.nodes.Load(addr); !ok || cur != c {
				return // a dropped circuit, changing under a call begun before the drop
			}
		}
		b.changed(addr, from, to)
	}
	b.states.Store(addr, gobreaker.StateClosed)
	return gobreaker.NewCircuitBreaker[struct{}](st)
}

// NodeHook is the hook for one node's client of a Redis Cluster client
// (ClusterClient.OnNewNode): its calls go through that node's own circuit,
// made on first use and shared by every client of the node.
func (b *Breaker) NodeHook(node *redis.Client) redis.Hook {
	addr := node.Options().Addr
	b.nodeCircuit(addr, node)
	return nodeHook{b: b, node: node, addr: addr}
}

// nodeCircuit is addr's circuit, made now if it has none: the node's
// first call, or its first since the probe dropped its circuit (a node
// that served no slots then and may again, as a promoted replica of the
// primary that replaced it). The dropped circuit stays open with nobody
// to probe it; a hook that kept it refused every call to that node for
// good once it was a primary again (the fault suite's back-to-back
// Cluster failovers, from the third round on).
func (b *Breaker) nodeCircuit(addr string, node *redis.Client) *gobreaker.CircuitBreaker[struct{}] {
	if c, ok := b.nodes.Load(addr); ok {
		return c.(*circuit).cb
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.nodes.Load(addr); ok {
		return c.(*circuit).cb
	}
	c := &circuit{node: node}
	c.cb = b.newCircuit(addr, c)
	b.nodes.Store(addr, c)
	return c.cb
}

// allClosed reports whether every circuit was closed at its last change.
func (b *Breaker) allClosed() bool {
	closed := true
	b.states.Range(func(_, v any) bool {
		closed = v.(gobreaker.State) == gobreaker.StateClosed
		return closed
	})
	return closed
}

// worst is the state of the circuit furthest from closed (open > half-open).
func (b *Breaker) worst() gobreaker.State {
	w := gobreaker.StateClosed
	b.states.Range(func(_, v any) bool {
		if st := v.(gobreaker.State); st == gobreaker.StateOpen || st == gobreaker.StateHalfOpen && w == gobreaker.StateClosed {
			w = st
		}
		return true
	})
	return w
}

// changed runs under the changing circuit's lock (gobreaker's): it must
// not call that circuit, and calls no other.
func (b *Breaker) changed(addr string, from, to gobreaker.State) {
	if from == gobreaker.StateClosed {
		b.epoch.Add(1)
	}
	b.states.Store(addr, to)
	breakerState.WithLabelValues("redis").Set(float64(b.worst()))
	args := []any{"from", from.String(), "to", to.String()}
	if addr != "" {
		args = append(args, "node", addr)
	}
	switch {
	case from == gobreaker.StateClosed:
		breakerTrips.WithLabelValues("redis").Inc()
		b.log.Warn("redis circuit breaker", args...)
	case to == gobreaker.StateClosed:
		b.log.Warn("redis circuit breaker", args...)
	default:
		// A probe let through and failed: the outage goes on, one line
		// for it is enough.
		b.log.Debug("redis circuit breaker", args...)
	}
	if to == gobreaker.StateClosed {
		b.startResync()
	}
}

// startResync runs OnClose once more (in a goroutine) unless Close ran.
func (b *Breaker) startResync() {
	if b.onClose != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.closed {
			return
		}
		b.resyncing.Add(1)
		b.resyncs.Add(1)
		go b.resync()
	}
}

// resync runs OnClose until it succeeds, until the breaker leaves the
// closed state (the next close runs it again), or until Close.
// A re-sync cut short by Close leaves the breaker unusable.
func (b *Breaker) resync() {
	defer b.resyncs.Done()
	for {
		err := b.onClose(b.ctx)
		if err == nil {
			b.resyncing.Add(-1)
			return
		}
		if b.ctx.Err() != nil {
			return
		}
		b.log.Error("re-sync after the redis outage failed; retrying", "err", err)
		if !b.allClosed() {
			b.resyncing.Add(-1)
			return
		}
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Close stops a re-sync under way (its OnClose sees its context end) and
// waits for it; none starts after. Usable stays false if one was cut
// short: Redis was never re-synced.
func (b *Breaker) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.resyncs.Wait()
}

// Usable reports whether grabs may use Redis: the client-wide circuit is
// closed and no re-sync after an outage is running. A cluster node's open
// circuit does not count: the calls to that node fail at once by
// themselves (ErrRedisUnavailable), and the other shards' go on; so on a
// cluster the database fallback does not sell for one shard's outage.
func (b *Breaker) Usable() bool {
	st, _ := b.states.Load("")
	return st == gobreaker.StateClosed && b.resyncing.Load() == 0
}

// Epoch counts the outages: it changes each time the breaker leaves the
// closed state. A read made while Usable, with the epoch the same before
// and after it, came from a Redis that was not re-synced meanwhile.
func (b *Breaker) Epoch() uint64 { return b.epoch.Load() }

// Down reports whether Redis is taken to be down: a circuit is open or
// half-open (its probe has not yet succeeded), a cluster node's too. The
// database fallback may sell while Down and not Usable; not while the
// re-sync runs.
func (b *Breaker) Down() bool {
	return !b.allClosed()
}

// Prober returns the job that probes Redis with ping, through the
// breaker, every interval while the breaker is not closed (a run reports
// whether it probed). Grabs do not probe: while Redis is down they are
// answered without it (UNAVAILABLE, or by the database fallback), and a
// grab as the half-open probe could sell from a load that the database
// fallback made stale. It runs on every node, under no lease: each node
// has its own breaker.
func (b *Breaker) Prober(interval time.Duration, ping func(context.Context) error) *maintenance.Job[bool] {
	return maintenance.New(maintenance.Config{Name: "redis-probe", Interval: interval, FirstAfterInterval: true}, b.log,
		func(ctx context.Context) (bool, error) {
			if b.allClosed() {
				return false, nil
			}
			pctx, cancel := context.WithTimeout(context.WithValue(ctx, probeCall{}, true), max(interval, probeTimeout))
			defer cancel()
			if b.cb.State() != gobreaker.StateClosed {
				_ = ping(pctx) // a failed probe is the breaker's to count, not the job's to log
			}
			b.probeNodes(pctx)
			return true, nil
		})
}

// probeNodes pings, through its own circuit, each cluster node whose
// circuit is not closed, and drops the circuits of nodes that no longer
// serve slots as primaries (a failed-over primary, gone or a replica now:
// no grab goes there, and its open circuit would keep Down true for good).
func (b *Breaker) probeNodes(ctx context.Context) {
	open := map[string]*circuit{}
	b.nodes.Range(func(k, v any) bool {
		if c := v.(*circuit); c.cb.State() != gobreaker.StateClosed {
			open[k.(string)] = c
		}
		return true
	})
	b.mu.Lock()
	masters := b.Masters
	b.mu.Unlock()
	if len(open) == 0 {
		return
	}
	if masters != nil {
		if current, err := masters(ctx); err == nil {
			var gone []string
			for addr := range open {
				if !slices.Contains(current, addr) {
					gone = append(gone, addr)
				}
			}
			if len(gone) > 0 && b.Dropped != nil {
				b.Dropped(ctx)
			}
			for _, addr := range gone {
				b.dropNode(addr)
				delete(open, addr)
			}
		}
	}
	for _, c := range open {
		_ = c.node.Ping(ctx).Err()
	}
}

// dropNode forgets the circuit of a node that serves no slots any more.
func (b *Breaker) dropNode(addr string) {
	b.mu.Lock()
	b.nodes.Delete(addr)
	b.mu.Unlock()
	b.states.Delete(addr)
	breakerState.WithLabelValues("redis").Set(float64(b.worst()))
	b.log.Warn("redis node serves no slots as a primary any more; its circuit is dropped", "node", addr)
	if b.allClosed() {
		b.startResync()
	}
}

// probeTimeout is the least time a probe's ping is given: a Redis that is
// back but slow (a busy machine, a replica catching up) must still close
// the breaker.
const probeTimeout = 250 * time.Millisecond

// inBreaker marks the context of a call the breaker let through: go-redis
// runs a new connection's handshake (HELLO, CLIENT SETINFO) through the
// same hooks with the same context, and that handshake is part of the
// call, not a second request (in the half-open state, a second request
// would be refused and fail the probe).
type inBreaker struct{}

// probeCall marks the Prober's ping: the only call that may pass a breaker that
// is not closed. Any other call as the half-open probe could close it on
// a cancelled caller's "success" while Redis is still down.
type probeCall struct{}

func run(cb *gobreaker.CircuitBreaker[struct{}], ctx context.Context, call func(context.Context) error) error {
	if ctx.Value(inBreaker{}) != nil {
		return call(ctx)
	}
	if ctx.Value(probeCall{}) == nil && cb.State() != gobreaker.StateClosed {
		return fmt.Errorf("%w: %w", ErrRedisUnavailable, gobreaker.ErrOpenState)
	}
	ctx = context.WithValue(ctx, inBreaker{}, true)
	_, err := cb.Execute(func() (struct{}, error) { return struct{}{}, call(ctx) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("%w: %w", ErrRedisUnavailable, err)
	}
	return err
}

// DialHook implements redis.Hook.
func (b *Breaker) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: the client-wide circuit.
func (b *Breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return processHook(func() *gobreaker.CircuitBreaker[struct{}] { return b.cb }, next, "")
}

// ProcessPipelineHook implements redis.Hook: the client-wide circuit.
func (b *Breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return pipelineHook(func() *gobreaker.CircuitBreaker[struct{}] { return b.cb }, next, "")
}

// nodeHook is a cluster node's hook (NodeHook): its own circuit.
type nodeHook struct {
	b    *Breaker
	node *redis.Client
	addr string
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return processHook(func() *gobreaker.CircuitBreaker[struct{}] { return h.b.nodeCircuit(h.addr, h.node) }, next, h.addr)
}

func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return pipelineHook(func() *gobreaker.CircuitBreaker[struct{}] { return h.b.nodeCircuit(h.addr, h.node) }, next, h.addr)
}

// nodeDown marks a call a cluster node's open circuit refused: the node
// may have failed over, so a cluster client's slot map may be out of date
// (persistence's slot-map refresh reloads it on ClusterNodeDown).
type nodeDown struct{ addr string }

func (d nodeDown) Error() string       { return "the circuit of cluster node " + d.addr + " is open" }
func (nodeDown) ClusterNodeDown() bool { return true }

func processHook(cb func() *gobreaker.CircuitBreaker[struct{}], next redis.ProcessHook, node string) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := run(cb(), ctx, func(ctx context.Context) error { return next(ctx, cmd) })
		if errors.Is(err, ErrRedisUnavailable) {
			if node != "" {
				err = fmt.Errorf("%w: %w", err, nodeDown{node})
			}
			cmd.SetErr(err)
		}
		return err
	}
}

func pipelineHook(cb func() *gobreaker.CircuitBreaker[struct{}], next redis.ProcessPipelineHook, node string) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := run(cb(), ctx, func(ctx context.Context) error { return next(ctx, cmds) })
		if errors.Is(err, ErrRedisUnavailable) {
			if node != "" {
				err = fmt.Errorf("%w: %w", err, nodeDown{node})
			}
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
		return err
	}
}
