package persistence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
)

// BatchOptions tunes a batch writer of a family of logs.
type BatchOptions struct {
	// AttemptTimeout bounds one database attempt (a batch's transaction,
	// a dead-letter insert): a database that stops answering without
	// closing the connection fails the attempt instead of hanging the
	// writer. Zero takes AttemptTimeoutDefault.
	AttemptTimeout time.Duration
	// Consumer is the writer's consumer name: the red-packet writer's name
	// among the holders of a red packet's grabs (holdGrabsScript).
	Consumer string
	// Hold is how long each such claim lasts: two of the writer's retries
	// (a pause and an attempt), so that a live writer renews it before it
	// lapses. Zero takes 2 * (2 s + AttemptTimeout).
	Hold time.Duration
}

// AttemptTimeoutDefault bounds one database attempt of a log writer. With
// the writers' largest pause between retries (2 s) it stays below
// ReloadHoldDefault: an order sold before Redis lost a voucher is returned
// to the reloaded stock only while the reload holds its sales (see adopt),
// and a writer holding it retries within that time.
const AttemptTimeoutDefault = 3 * time.Second

func (o BatchOptions) withDefaults() BatchOptions {
	o.AttemptTimeout = cmp.Or(o.AttemptTimeout, AttemptTimeoutDefault)
	o.Hold = cmp.Or(o.Hold, 2*(2*time.Second+o.AttemptTimeout))
	return o
}

// OrderWriter moves batches of accepted orders from the Redis order log
// into tb_voucher_order: Handle inserts hundreds of entries with one
// multi-row INSERT ... ON CONFLICT DO NOTHING, takes the inserted ones off
// tb_seckill_voucher.stock and writes their ledger rows in the same
// transaction. The persistence actor reads the entries, calls Handle and
// only then acknowledges them. A crash before the acknowledgement replays
// the batch, and the conflict clause makes the replay a no-op, so every
// order lands exactly once.
//
// It is the order log's handler (Handle), dead-letter sink
// (tb_order_dead_letter, DeadLetter) and pruning of finished logs (Prune);
// it runs nothing by itself.
type OrderWriter struct {
	db      *bun.DB
	rdb     redis.UniversalClient
	log     *slog.Logger
	now     func() time.Time
	attempt time.Duration // AttemptTimeout
	// persisted counts the orders this writer inserted (as
	// flashsale_orders_persisted_total does for the process), so that the
	// shutdown log can say how many reached the database while draining.
	persisted atomic.Int64
}

// NewOrderWriter returns the batch writer of the order log.
func NewOrderWriter(db *bun.DB, rdb redis.UniversalClient, log *slog.Logger, opts BatchOptions) *OrderWriter {
	opts = opts.withDefaults()
	return &OrderWriter{db: db, rdb: rdb, log: log, now: time.Now, attempt: opts.AttemptTimeout}
}

// Persisted counts the orders this writer has inserted since it was made.
func (w *OrderWriter) Persisted() int64 { return w.persisted.Load() }

// InFlight counts a voucher's orders accepted in Redis but not yet
// committed to the database.
func InFlight(ctx context.Context, rdb redis.UniversalClient, voucherID int64) (int64, error) {
	n, err := rdb.XLen(ctx, LogKey(voucherID)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("order log length of voucher %d: %w", voucherID, err)
	}
	return n, nil
}

// pendingOrder is an order of the batch being handled; bad is set once it
// is refused for good.
type pendingOrder struct {
	orderEntry
	bad *domain.Refusal
}

// Handle persists a batch of order-log entries (see persist) and returns
// the entries refused for good: malformed ones, and those the database
// proves cannot exist.
func (w *OrderWriter) Handle(ctx context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error) {
	began := time.Now()
	writeBatchSize.Observe(float64(len(batch)))
	defer func() { writeDuration.Observe(time.Since(began).Seconds()) }()
	now := w.now().UTC()
	entries := make([]pendingOrder, len(batch))
	for i, e := range batch {
		oe, err := decodeOrderEntry(e.Values, now)
		entries[i].orderEntry = oe
		if err != nil {
			entries[i].bad = refuse(DeadMalformed, err)
		}
	}
	err := w.persist(ctx, entries)
	refused := map[int]*domain.Refusal{}
	var recorded []int64
	for i, e := range entries {
		if e.bad != nil {
			refused[i] = e.bad
		} else if err == nil {
			recorded = append(recorded, e.order.ID)
		}
	}
	// One announcement per batch, after its commit: subscribers of these
	// orders see them leave the order log.
	announceOrders(ctx, w.rdb, w.log, recorded)
	return refused, err
}

// persist inserts a batch in one transaction: the orders (replays of
// orders already there are skipped), the stock they take and their ledger
// rows. If the database refuses the batch for a constraint (an order that
// cannot exist: over the per-user slot, past the stock, an id already used
// by another order), it retries order by order and marks the refused ones
// bad, so that one impossible order never blocks the others. Any other
// error is returned and the whole batch is retried later.
func (w *OrderWriter) persist(ctx context.Context, entries []pendingOrder) error {
	rows := make([]orderRow, 0, len(entries))
	byID := make(map[int64][]*pendingOrder, len(entries))
	for i := range entries {
		e := &entries[i]
		if e.bad != nil {
			continue
		}
		if same := byID[e.order.ID]; len(same) > 0 { // a claim and a read may overlap
			if first := same[0].order; !sameOrder(first, e.order) {
				e.bad = refuse(DeadIDCollision, fmt.Errorf("order id %d used twice in the order log (%s and %s)", e.order.ID, describeOrder(first), describeOrder(e.order)))
				continue
			}
		} else {
			rows = append(rows, e.order)
		}
		byID[e.order.ID] = append(byID[e.order.ID], e)
	}
	if len(rows) == 0 {
		return nil
	}
	err := w.attemptInsert(ctx, rows, byID)
	if err == nil || !isConstraintViolation(err) {
		return err
	}
	w.log.WarnContext(ctx, "database refused a batch of orders; retrying them one by one", "orders", len(rows), "err", err)
	for _, row := range rows {
		if byID[row.ID][0].bad != nil {
			continue // refused while the batch was tried (a lost load)
		}
		err := w.attemptInsert(ctx, []orderRow{row}, byID)
		if isConstraintViolation(err) {
			reason := refusalReason(err)
			w.log.WarnContext(ctx, "database refused an order", "order", row.ID, "reason", reason, "err", err)
			for _, e := range byID[row.ID] {
				e.bad = refuse(reason, fmt.Errorf("order %d: %s", row.ID, refusalText[reason]))
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// attemptInsert runs one transaction inserting rows, under its own
// deadline (AttemptTimeout): a database that stops answering without
// closing the connection fails the attempt instead of hanging the writer.
// Orders the transaction refuses for good (refusedOrders: of no seckill
// voucher, or sold from a lost Redis load, see adopt) are marked bad and
// the transaction is tried again without them.
func (w *OrderWriter) attemptInsert(ctx context.Context, rows []orderRow, byID map[int64][]*pendingOrder) error {
	for {
		actx, cancel := context.WithTimeout(ctx, w.attempt)
		err := w.db.RunInTx(actx, nil, func(ctx context.Context, tx bun.Tx) error {
			return w.insertOrders(ctx, tx, rows, byID)
		})
		cancel()
		var refused *refusedOrders
		if !errors.As(err, &refused) {
			return err
		}
		keep := rows[:0:0]
		for _, r := range rows {
			if refused.ids[r.ID] {
				for _, e := range byID[r.ID] {
					e.bad = refuse(refused.reason, refused.explain(r))
				}
			} else {
				keep = append(keep, r)
			}
		}
		if rows = keep; len(rows) == 0 {
			return nil
		}
	}
}

// refusedOrders aborts a transaction holding orders that cannot be
// persisted, for one reason: DeadUnknownVoucher (no seckill voucher by
// that id) or DeadLostLoad (sold from a Redis load that was lost and can
// no longer be taken back).
type refusedOrders struct {
	reason string
	ids    map[int64]bool
}

func (l *refusedOrders) explain(r orderRow) error {
	if l.reason == DeadUnknownVoucher {
		return fmt.Errorf("order %d names voucher %d, which is no seckill voucher", r.ID, r.VoucherID)
	}
	return fmt.Errorf("order %d was sold from a Redis load of voucher %d that was lost, "+
		"and the reload from the database already sells again", r.ID, r.VoucherID)
}

func (l *refusedOrders) Error() string {
	return fmt.Sprintf("%d orders refused: %s", len(l.ids), l.reason)
}
