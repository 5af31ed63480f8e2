// Package writer is the persistence actor: one protoactor actor per family
// of order logs (the vouchers' orders, the red packets' grabs) that reads
// the family's logs in batches as one consumer of their group, writes each
// batch through the family's store, dead-letters what the database
// refuses for good, acknowledges, and prunes finished logs.
//
// It guarantees, whatever fails: every entry is handled until the store
// succeeds (retried with backoff up to MaxBackoff), never acknowledged
// before; refused entries are dead-lettered before they are acknowledged;
// an acknowledged entry is deleted from its log at once, so a log's length
// is exactly its unhandled entries; entries left pending by a dead
// consumer are taken over after ClaimIdle, and those whose delivery reply
// was lost are read again at once.
//
// The actor never blocks its mailbox for long: each message is one step
// (a bounded read, one attempt at a batch), and it sends itself the next
// poll, at once or after a pause. A panic restarts it under protoactor's
// exponential-backoff supervisor; the new incarnation re-reads the entries
// its predecessor left pending, and the stores' conflict clauses make the
// replay a no-op.
package writer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"flashsale/domain"
	"flashsale/internal/lease"
)

// Logs is the Redis side of a family of logs (persistence.Logs): each
// call is one round trip, or one per log at most.
type Logs interface {
	List(ctx context.Context) ([]string, error)
	Read(ctx context.Context, consumer string, logs []string, id string, count int, block time.Duration) ([]domain.LogEntry, error)
	Claim(ctx context.Context, consumer string, logs []string, minIdle time.Duration, count int) ([]domain.LogEntry, error)
	Ack(ctx context.Context, batch []domain.LogEntry) error
	Sample(ctx context.Context, logs []string) (domain.LogSample, error)
	Length(ctx context.Context) (int64, error)
	RemoveDeadConsumers(ctx context.Context, self string, logs []string, idle time.Duration) int
}

// NamedLogs are Logs that also keep the leases on their consumers' names
// (persistence.Logs). N is the store's own type of lease
// (persistence.ConsumerName): Go matches a method's result type exactly,
// so a store whose ConsumerName returns its own type satisfies
// NamedLogs[N] but never an interface whose ConsumerName returns a
// lease.Named.
type NamedLogs[N lease.Named] interface {
	Logs
	ConsumerName(consumer string) N
}

// Handler writes a family's batches (persistence.OrderLogHandler,
// persistence.RedPacketLogHandler).
type Handler interface {
	// Handle processes a batch of entries of one or more logs. Its work
	// must be idempotent per entry: a crash before the acknowledgement
	// hands the same entries to it again. It returns, by their index in
	// batch, the entries it refuses for good; those, also when returned
	// with an error, are not handed to it again. After an error the rest
	// of the batch is retried, with backoff, until Handle returns nil;
	// only then are the refused entries dead-lettered and the whole batch
	// acknowledged.
	Handle(ctx context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error)
	// DeadLetter keeps refused entries durably, before the writer
	// acknowledges them. The same entry may come again (a crash before the
	// acknowledgement): it must be kept once, by its log and id.
	DeadLetter(ctx context.Context, dead []domain.DeadEntry) error
	// Prune drops finished logs from the registry and returns how many;
	// it runs with every claim pass.
	Prune(ctx context.Context, logs []string) int
	// Persisted counts what the handler inserted.
	Persisted() int64
}

// LeaseRows is a family's writers' lease rows (persistence.WriterLeases).
type LeaseRows interface {
	// Report refreshes the consumer's lease; clean records that it holds
	// nothing now (no entry read, no read in flight).
	Report(ctx context.Context, consumer string, clean bool) error
	// Release removes the consumer's row.
	Release(ctx context.Context, consumer string) error
}

// Family is a set of logs read by one consumer group, and what the writer
// does with them. The node builds it from persistence's stores (Orders,
// RedPackets).
type Family struct {
	Name string // who works, in log messages ("order writer")
	Logs Logs
	// ConsumerName is where the lease on a consumer's name in the family
	// lives (NamedLogs.ConsumerName): Writer.Acquire takes it.
	ConsumerName func(consumer string) lease.Named
	Handler      Handler
	// Lag, if set, is kept at the number of entries in all logs;
	// LagSeconds at the age of the oldest of them; Pending at the number
	// delivered to a consumer and not yet acknowledged. They are sampled
	// after each batch and, while the logs are quiet, once a second.
	Lag        prometheus.Gauge
	LagSeconds prometheus.Gauge
	Pending    prometheus.Gauge
	// Failures, if set, counts failed attempts of the handler.
	Failures prometheus.Counter
	// Leases, if set, keeps the writer's lease row and the last time it
	// held nothing, which a reload of a voucher Redis lost waits for
	// instead of a fixed hold.
	Leases LeaseRows
}

// NewFamily returns the family called name: logs, whose batches handler
// writes; it keeps no metrics and no lease rows.
func NewFamily[N lease.Named](name string, logs NamedLogs[N], handler Handler) Family {
	return Family{
		Name: name, Logs: logs, Handler: handler,
		ConsumerName: func(consumer string) lease.Named { return logs.ConsumerName(consumer) },
	}
}

// Orders is the family of the vouchers' order logs: handler writes them
// into tb_voucher_order (persistence.OrderLogHandler), and leases keeps
// the rows a reload of a voucher Redis lost waits for.
func Orders[N lease.Named](logs NamedLogs[N], handler Handler, leases LeaseRows) Family {
	f := NewFamily("order writer", logs, handler)
	f.Lag, f.LagSeconds, f.Pending, f.Failures = orderLogLag, orderLogLagSeconds, orderLogPending, orderWriteErrors
	f.Leases = leases
	return f
}

// RedPackets is the family of the red packets' order logs: handler
// writes them into tb_red_packet_grab (persistence.RedPacketLogHandler).
func RedPackets[N lease.Named](logs NamedLogs[N], handler Handler) Family {
	f := NewFamily("red-packet writer", logs, handler)
	f.Lag, f.Failures = redPacketLogLag, redPacketWriteErrors
	return f
}

// Writer is the handle on one persistence actor, a lifecycle service:
// Acquire takes its consumer name, Start spawns it in its actor system,
// Stop stops it.
type Writer struct {
	fam    Family
	opts   Options
	log    *slog.Logger
	system *actor.ActorSystem
	ctx    context.Context // every store call; cancelled by Stop
	cancel context.CancelFunc

	mu     sync.Mutex
	pid    *actor.PID
	held   *lease.Lease
	keeper *lease.Keeper

	// incarnation numbers the actor's starts: polls of an earlier
	// incarnation (a timer that fired across a restart) are ignored.
	incarnation atomic.Int64
}

// New returns the writer of a family, to run in system (the router's, in
// a node: it starts and stops with the node's actors); nothing runs before
// Start.
func New(fam Family, system *actor.ActorSystem, log *slog.Logger, opts Options) *Writer {
	ctx, cancel := context.WithCancel(context.Background())
	return &Writer{fam: fam, system: system, opts: opts.withDefaults(), log: log, ctx: ctx, cancel: cancel}
}

// Acquire takes the lease on the writer's consumer name, so that no other
// running process reads the family's logs under the same name: two nodes
// given the same NODE_ID fail here with an error wrapping lease.ErrInUse.
// Start keeps it, Stop releases it.
func (w *Writer) Acquire(ctx context.Context) error {
	l, err := lease.TakeName(ctx, w.fam.ConsumerName(w.opts.Consumer), w.opts.ConsumerLease)
	if errors.Is(err, lease.ErrInUse) {
		return fmt.Errorf("consumer name %q %w", w.opts.Consumer, err) // "... in use by another running process"
	}
	if err != nil {
		return fmt.Errorf("consumer name %q: %w", w.opts.Consumer, err)
	}
	w.mu.Lock()
	w.held = l
	w.mu.Unlock()
	return nil
}

// Start spawns the actor in the writer's actor system, supervised: a
// failure restarts it after RestartBackoff times the failures of the last
// RestartWindow. It renews the lease Acquire took (if any) until Stop.
func (w *Writer) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pid != nil {
		return nil
	}
	if w.held != nil {
		clash := false
		w.keeper = w.held.Keeper(lease.KeepOptions{Every: w.opts.ConsumerLease / 5, OnError: func(err error) {
			// Another process uses the name: two nodes share a NODE_ID.
			// The writer goes on (nothing is lost, see lease.TakeName).
			if errors.Is(err, lease.ErrLost) && !clash {
				w.log.Error("another running process uses this node's consumer name; give each node its own NODE_ID",
					"consumer", w.opts.Consumer, "err", err)
			}
			clash = errors.Is(err, lease.ErrLost)
		}})
		_ = w.keeper.Start(w.ctx)
	}
	supervisor := actor.NewExponentialBackoffStrategy(w.opts.RestartWindow, w.opts.RestartBackoff)
	props := actor.PropsFromProducer(func() actor.Actor { return &writerActor{w: w} }, actor.WithGuardian(supervisor))
	w.pid = w.system.Root.Spawn(props)
	return nil
}

// Stop ends the actor's store calls, stops it and waits for it, then
// releases the consumer name. Entries read and not yet acknowledged stay
// pending for this consumer name, which re-reads them when it next runs.
func (w *Writer) Stop() {
	w.cancel()
	w.mu.Lock()
	pid, keeper := w.pid, w.keeper
	w.pid, w.keeper = nil, nil
	w.mu.Unlock()
	if pid != nil {
		_ = w.system.Root.StopFuture(pid).Wait()
	}
	if keeper != nil {
		keeper.Stop()
	}
	if pid != nil && w.fam.Leases != nil {
		// Stopped, the writer holds nothing: a reload need not wait for
		// it until its row lapses.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := w.fam.Leases.Release(ctx, w.opts.Consumer); err != nil {
			w.log.Warn(w.fam.Name+" could not release its lease row; reloads wait for it until it lapses", "err", err)
		}
		cancel()
	}
}

// Wake ends a pause of the writer now and resets its backoff: Redis or
// the database is back after an outage, during which the backoff grew
// to MaxBackoff. Without it the writer read the orders a reload's hold
// waits for up to MaxBackoff after Redis served again. No-op before Start
// and after Stop.
func (w *Writer) Wake() {
	w.mu.Lock()
	pid := w.pid
	w.mu.Unlock()
	if pid != nil {
		w.system.Root.Send(pid, wake{})
	}
}

// Persisted counts what the family's handler has inserted.
func (w *Writer) Persisted() int64 { return w.fam.Handler.Persisted() }

// Restarts counts the supervisor's restarts of the actor.
func (w *Writer) Restarts() int64 { return max(0, w.incarnation.Load()-1) }

// WaitDrained waits until every registered log of the family is empty
// (every entry handled and acknowledged), polling, or until ctx ends.
func (w *Writer) WaitDrained(ctx context.Context) error {
	for {
		total, err := w.fam.Logs.Length(ctx)
		if err != nil {
			return err
		}
		if total == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d entries not yet handled: %w", total, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
