package persistence

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// LogEntry is one entry of a log as a LogConsumer read it.
type LogEntry struct {
	Log    string         // the key of the log it was read from
	ID     string         // its id in that log
	Values map[string]any // its fields, as written
}

// Refusal says why an entry can never be processed: it is dead-lettered
// with its reason instead of blocking the log or vanishing.
type Refusal struct {
	Reason string // low-cardinality code: a metric label and a column
	Err    error  // what exactly, in words
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

func refuse(reason string, err error) *Refusal { return &Refusal{Reason: reason, Err: err} }

// BatchHandler does the work of one family of logs (the order writer's is
// one): the LogConsumer owns reading, claiming, retries, dead letters and
// acknowledgements, so a second family reuses them by writing only this.
type BatchHandler interface {
	// Handle processes a batch of entries of one or more logs. Its work
	// must be idempotent per entry: a crash before the acknowledgement
	// hands the same entries to a handler again. It returns, by their
	// index in batch, the entries it refuses for good; those, also when
	// returned with an error, are not handed to it again. After an error
	// the rest of the batch is retried, with backoff, until Handle returns
	// nil; only then are the refused entries dead-lettered and the whole
	// batch acknowledged.
	Handle(ctx context.Context, batch []LogEntry) (refused map[int]*Refusal, err error)
}

// DeadEntry is an entry refused for good, with why.
type DeadEntry struct {
	Entry LogEntry
	Why   *Refusal
}

// DeadLetterSink keeps refused entries durably, before the consumer
// acknowledges them. The same entry may come again (a crash before the
// acknowledgement): it must be kept once, by its log and id.
type DeadLetterSink interface {
	DeadLetter(ctx context.Context, dead []DeadEntry) error
}

// LogFamily is a set of logs read by one consumer group, and what a
// LogConsumer does with them.
type LogFamily struct {
	Name     string // who works, in log messages ("order writer")
	Registry string // the set listing the family's logs
	Group    string // the consumer group of every log
	// LeasePrefix prefixes the consumer name in the key of its lease (see
	// Acquire); families read by one process need different prefixes.
	LeasePrefix string
	Handler     BatchHandler
	DeadLetters DeadLetterSink
	// Prune, if set, drops finished logs from the registry and returns
	// how many; it runs with every claim pass.
	Prune func(ctx context.Context, logs []string) int
	// Lag, if set, is kept at the number of entries in all logs;
	// LagSeconds at the age of the oldest of them; Pending at the number
	// delivered to a consumer and not yet acknowledged. They are sampled
	// after each batch and, while the logs are quiet, once a second.
	Lag        prometheus.Gauge
	LagSeconds prometheus.Gauge
	Pending    prometheus.Gauge
	// Failures, if set, counts failed attempts of the handler.
	Failures prometheus.Counter
}

// LogConsumerOptions tunes a LogConsumer; zero values take defaults.
type LogConsumerOptions struct {
	// Consumer names this writer in the consumer group: the node's stable
	// identity (NODE_ID), so that after a restart it re-reads the entries
	// it left pending at once. Never shared by two running processes (see
	// Acquire). Empty takes a name of its own for this process only.
	Consumer string
	// Batch is how many log entries are read and handled at once.
	Batch int
	// Block is how long one read waits for new entries.
	Block time.Duration
	// Linger is how long the consumer waits after a batch that did not
	// fill before it reads the next one, so that under a steady trickle
	// the entries gather into fewer, larger transactions (a batch's
	// commit and its per-batch statements cost the same for one entry or
	// hundreds). The first entry after a quiet spell is read at once;
	// each later one waits at most Linger longer. 0 takes LingerDefault;
	// negative: none.
	Linger time.Duration
	// ClaimIdle is how long an entry must sit unacknowledged with another
	// consumer before this one takes it over (that consumer is presumed
	// dead).
	ClaimIdle time.Duration
	// ClaimEvery is how often pending entries of others are examined.
	ClaimEvery time.Duration
	// Reclaim, if set, runs each take-over of other consumers' entries as
	// a cluster-wide singleton (lease.Redlock.Do under a fixed name, wired
	// by main): one node reclaims at a time, the others skip their turn.
	// XAUTOCLAIM hands an entry to one claimer anyway; the lease saves the
	// duplicate scans.
	Reclaim func(ctx context.Context, fn func(ctx context.Context) error) (ran bool, err error)
	// MaxBackoff caps the wait between retries while the handler fails.
	MaxBackoff time.Duration
	// AttemptTimeout bounds one database attempt (a batch's transaction,
	// a dead-letter insert). MaxBackoff + AttemptTimeout must stay below
	// Stock.ReloadHold: an order sold before Redis lost a voucher is
	// returned to the reloaded stock only while the reload holds its sales
	// (see adopt), and a writer holding it retries within that time.
	AttemptTimeout time.Duration
	// ConsumerLease is how long the lease on the consumer name outlives a
	// writer that stopped refreshing it (killed): a restarted node on
	// another host, or whose predecessor's pid was reused, waits that long.
	ConsumerLease time.Duration
	// DeadConsumerIdle is how long a consumer holding no entry may go
	// without reading before it is deleted from the groups.
	DeadConsumerIdle time.Duration
}

// Defaults of LogConsumerOptions, exported for configuration.
const (
	BatchDefault            = 500
	BlockDefault            = 200 * time.Millisecond
	LingerDefault           = 20 * time.Millisecond
	ClaimIdleDefault        = 30 * time.Second
	MaxBackoffDefault       = 2 * time.Second // with AttemptTimeoutDefault, below ReloadHoldDefault (see OrderWriterOptions)
	AttemptTimeoutDefault   = 3 * time.Second // bounds one database attempt of the order writer
	ConsumerLeaseDefault    = 10 * time.Second
	DeadConsumerIdleDefault = 10 * time.Minute
)

func (o LogConsumerOptions) withDefaults() LogConsumerOptions {
	if o.Consumer == "" {
		o.Consumer = "writer-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if o.Batch <= 0 {
		o.Batch = BatchDefault
	}
	if o.Block <= 0 {
		o.Block = BlockDefault
	}
	if o.Linger == 0 {
		o.Linger = LingerDefault
	}
	if o.ClaimIdle <= 0 {
		o.ClaimIdle = ClaimIdleDefault
	}
	if o.ClaimEvery <= 0 {
		o.ClaimEvery = o.ClaimIdle / 3
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = MaxBackoffDefault
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = AttemptTimeoutDefault
	}
	if o.ConsumerLease <= 0 {
		o.ConsumerLease = ConsumerLeaseDefault
	}
	if o.DeadConsumerIdle <= 0 {
		o.DeadConsumerIdle = DeadConsumerIdleDefault
	}
	return o
}

// LogConsumer reads a family of Redis stream logs as one consumer of their
// group and hands the entries, in batches, to the family's handler. It
// guarantees, whatever fails: every entry is handled until the handler
// succeeds (retried with backoff up to MaxBackoff), never acknowledged
// before; refused entries are dead-lettered before they are acknowledged;
// an acknowledged entry is deleted from its log at once, so a log's length
// is exactly its unhandled entries; entries left pending by a dead
// consumer are taken over after ClaimIdle, and those whose delivery reply
// was lost are read again at once.
//
// It is a single goroutine loop rather than a protoactor actor: its work
// is blocking reads and transactions, which would only stall a mailbox.
type LogConsumer struct {
	rdb  redis.UniversalClient
	fam  LogFamily
	opts LogConsumerOptions
	log  *slog.Logger
	// lease is the value of our lease on the consumer name, once Acquire
	// took it; Run refreshes it.
	lease string
}

// NewLogConsumer returns a consumer of the family's logs; Run drives it.
func NewLogConsumer(rdb redis.UniversalClient, log *slog.Logger, fam LogFamily, opts LogConsumerOptions) *LogConsumer {
	return &LogConsumer{rdb: rdb, fam: fam, opts: opts.withDefaults(), log: log}
}

const minBackoff = 50 * time.Millisecond

// Run handles entries until ctx ends, then returns nil; it never drops an
// entry. Entries read but not yet acknowledged when ctx ends stay pending
// for this consumer name, which re-reads them when it next runs.
func (c *LogConsumer) Run(ctx context.Context) error {
	defer c.keepLease(ctx)()
	var (
		logs       []string
		lastList   time.Time
		lastClaim  time.Time
		lastLag    time.Time
		ownPending = true // at start, re-read what this consumer name left unacknowledged
		backoff    = minBackoff
	)
	for ctx.Err() == nil {
		var err error
		if time.Since(lastList) > time.Second || len(logs) == 0 {
			if logs, err = c.list(ctx); err != nil {
				c.pause(ctx, &backoff, "list logs", err)
				continue
			}
			lastList = time.Now()
			// Our own pending list holds nothing between batches, except
			// deliveries whose reply was lost. A failed read says so below,
			// but go-redis retries a read on a broken connection by itself
			// (MaxRetries), and then the loss is silent: look once a second.
			ownPending = true
			if len(logs) == 0 {
				c.updateLag(ctx, nil) // nothing left: every gauge to 0
				sleep(ctx, c.opts.Block)
				continue
			}
		}
		var batch []LogEntry
		switch {
		case time.Since(lastClaim) > c.opts.ClaimEvery:
			batch, err = c.reclaim(ctx, logs)
			if err == nil {
				lastClaim = time.Now()
				if c.fam.Prune != nil && c.fam.Prune(ctx, logs) > 0 {
					lastList = time.Time{} // list again without the pruned ones
				}
				c.removeDeadConsumers(ctx, logs)
			}
		case ownPending:
			batch, err = c.read(ctx, logs, "0", 0)
			if err == nil && len(batch) == 0 {
				ownPending = false
			}
		default:
			batch, err = c.read(ctx, logs, ">", c.opts.Block)
		}
		if err != nil {
			// Redis may have run the read and lost only its reply (a
			// dropped connection, or a kill after the append-only file
			// took the delivery): the entries then sit in our pending
			// list, which only a claim after ClaimIdle would find. The
			// list of logs may be stale too (Redis lost its data).
			ownPending = true
			lastList = time.Time{}
			c.pause(ctx, &backoff, "read", err)
			continue
		}
		if len(batch) == 0 {
			if time.Since(lastLag) > time.Second {
				c.updateLag(ctx, logs)
				lastLag = time.Now()
			}
			continue
		}
		refused, ok := c.handle(ctx, batch, &backoff)
		if !ok {
			return nil // ctx ended; the entries stay pending for the next run
		}
		if err = c.deadLetter(ctx, batch, refused); err != nil {
			ownPending = true // handled entries replay as no-ops
			c.pause(ctx, &backoff, "dead-letter", err)
			continue
		}
		if err = c.ack(ctx, batch); err != nil {
			// Handled but not acknowledged: they come back as our own
			// pending entries and are replayed as no-ops.
			ownPending = true
			c.pause(ctx, &backoff, "acknowledge", err)
			continue
		}
		backoff = minBackoff
		c.updateLag(ctx, logs)
		lastLag = time.Now()
		if len(batch) < c.opts.Batch && c.opts.Linger > 0 {
			sleep(ctx, c.opts.Linger) // let the next batch gather (Linger)
		}
	}
	return nil
}

// handle hands the batch to the handler until it succeeds, and returns
// what it refused; false if ctx ended first.
func (c *LogConsumer) handle(ctx context.Context, batch []LogEntry, backoff *time.Duration) (map[int]*Refusal, bool) {
	refused := map[int]*Refusal{}
	for ctx.Err() == nil {
		idx := make([]int, 0, len(batch))
		live := make([]LogEntry, 0, len(batch))
		for i, e := range batch {
			if refused[i] == nil {
				idx, live = append(idx, i), append(live, e)
			}
		}
		if len(live) == 0 {
			return refused, true
		}
		r, err := c.fam.Handler.Handle(ctx, live)
		for j, why := range r {
			if why != nil && j >= 0 && j < len(idx) {
				refused[idx[j]] = why
			}
		}
		if err == nil {
			return refused, true
		}
		if c.fam.Failures != nil {
			c.fam.Failures.Inc()
		}
		c.pause(ctx, backoff, "handle", err)
	}
	return nil, false
}

// deadLetter hands the refused entries to the family's sink, under one
// attempt's deadline.
func (c *LogConsumer) deadLetter(ctx context.Context, batch []LogEntry, refused map[int]*Refusal) error {
	if len(refused) == 0 {
		return nil
	}
	dead := make([]DeadEntry, 0, len(refused))
	for i, e := range batch {
		if why := refused[i]; why != nil {
			dead = append(dead, DeadEntry{Entry: e, Why: why})
		}
	}
	actx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout)
	defer cancel()
	return c.fam.DeadLetters.DeadLetter(actx, dead)
}

func (c *LogConsumer) pause(ctx context.Context, backoff *time.Duration, step string, err error) {
	if ctx.Err() != nil {
		return
	}
	c.log.WarnContext(ctx, c.fam.Name+" retrying", "step", step, "err", err, "backoff", backoff.String())
	sleep(ctx, *backoff)
	*backoff = min(*backoff*2, c.opts.MaxBackoff)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
