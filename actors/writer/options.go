package writer

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"flashsale/domain"
)

// Options tunes a Writer; zero values take defaults.
type Options struct {
	// Consumer names this writer in the consumer group: the node's stable
	// identity (NODE_ID), so that after a restart it re-reads the entries
	// it left pending at once. Never shared by two running processes (see
	// Writer.Acquire). Empty takes a name of its own for this process only.
	Consumer string
	// Batch is how many log entries are read and handled at once.
	Batch int
	// Block is how long one read waits for new entries: it bounds one
	// message of the actor, so a stop is honoured within it.
	Block time.Duration
	// Linger is how long the writer waits after a batch that did not
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
	// a cluster-wide singleton (lease.Redlock.Do under a fixed name, built
	// by node): one node reclaims at a time, the others skip their turn.
	// XAUTOCLAIM hands an entry to one claimer anyway; the lease saves the
	// duplicate scans.
	Reclaim func(ctx context.Context, fn func(ctx context.Context) error) (ran bool, err error)
	// MaxBackoff caps the wait between retries while the store fails.
	MaxBackoff time.Duration
	// AttemptTimeout bounds one database attempt (a batch's transaction,
	// a dead-letter insert). MaxBackoff + AttemptTimeout must stay below
	// persistence.ReloadHoldDefault (the node's tests check the defaults): an order sold before Redis lost a
	// voucher is returned to the reloaded stock only while the reload
	// holds its sales, and a writer holding it retries within that time.
	AttemptTimeout time.Duration
	// ConsumerLease is how long the lease on the consumer name outlives a
	// writer that stopped refreshing it (killed): a restarted node on
	// another host, or whose predecessor's pid was reused, waits that long.
	ConsumerLease time.Duration
	// DeadConsumerIdle is how long a consumer holding no entry may go
	// without reading before it is deleted from the groups.
	DeadConsumerIdle time.Duration
	// RestartBackoff is the supervisor's first wait before it restarts a
	// failed actor; each further failure within RestartWindow waits one
	// more RestartBackoff (protoactor's exponential-backoff strategy).
	RestartBackoff time.Duration
	// RestartWindow is how long without a failure resets the count.
	RestartWindow time.Duration
	// Tracer, if set, traces each attempt at a batch as a span, the
	// parent of the store's queries; Links, if set, gives the links of a
	// batch's span (the sold grabs' span contexts, by the entries' order
	// ids). Nil: no span.
	Tracer trace.Tracer
	Links  func(batch []domain.LogEntry) []trace.Link
}

// Defaults of Options, exported for configuration.
const (
	BatchDefault            = 500
	BlockDefault            = 200 * time.Millisecond
	LingerDefault           = 20 * time.Millisecond
	ClaimIdleDefault        = 30 * time.Second
	MaxBackoffDefault       = 2 * time.Second // with AttemptTimeoutDefault, below persistence.ReloadHoldDefault
	AttemptTimeoutDefault   = 3 * time.Second // persistence.AttemptTimeoutDefault
	ConsumerLeaseDefault    = 10 * time.Second
	DeadConsumerIdleDefault = 10 * time.Minute
	RestartBackoffDefault   = 200 * time.Millisecond
	RestartWindowDefault    = 30 * time.Second
)

func (o Options) withDefaults() Options {
	if o.Consumer == "" {
		o.Consumer = "writer-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	o.Batch = cmp.Or(o.Batch, BatchDefault)
	o.Block = cmp.Or(o.Block, BlockDefault)
	if o.Linger == 0 {
		o.Linger = LingerDefault
	}
	o.ClaimIdle = cmp.Or(o.ClaimIdle, ClaimIdleDefault)
	o.ClaimEvery = cmp.Or(o.ClaimEvery, o.ClaimIdle/3)
	o.MaxBackoff = cmp.Or(o.MaxBackoff, MaxBackoffDefault)
	o.AttemptTimeout = cmp.Or(o.AttemptTimeout, AttemptTimeoutDefault)
	o.ConsumerLease = cmp.Or(o.ConsumerLease, ConsumerLeaseDefault)
	o.DeadConsumerIdle = cmp.Or(o.DeadConsumerIdle, DeadConsumerIdleDefault)
	o.RestartBackoff = cmp.Or(o.RestartBackoff, RestartBackoffDefault)
	o.RestartWindow = cmp.Or(o.RestartWindow, RestartWindowDefault)
	return o
}

// StoreOptions is the share of a writer's options that its family's
// handler is built with, defaults applied: persistence.BatchOptions, which
// converts from it.
type StoreOptions struct {
	// AttemptTimeout bounds one database attempt.
	AttemptTimeout time.Duration
	// Consumer is the writer's consumer name.
	Consumer string
	// Hold is how long a claim the handler makes for the writer lasts:
	// two of its retries (a pause and an attempt), so that a live writer
	// renews it before it lapses.
	Hold time.Duration
}

// StoreOptions returns the handler's share of the options.
func (o Options) StoreOptions() StoreOptions {
	o = o.withDefaults()
	return StoreOptions{AttemptTimeout: o.AttemptTimeout, Consumer: o.Consumer, Hold: 2 * (o.MaxBackoff + o.AttemptTimeout)}
}
