package persistence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
)

// BatchOptions tunes the handler of a family of logs (OrderLogHandler,
// RedPacketLogHandler). Its fields match the persistence actor's
// StoreOptions one for one, which converts to it.
type BatchOptions struct {
	// AttemptTimeout bounds one database attempt (a batch's transaction,
	// a dead-letter insert): a database that stops answering without
	// closing the connection fails the attempt instead of hanging the
	// writer. Zero takes AttemptTimeoutDefault.
	AttemptTimeout time.Duration
	// Consumer is the writer's consumer name: the red-packet handler's
	// name among the holders of a red packet's grabs (holdGrabsScript).
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

// OrderLogHandler moves batches of accepted orders from the Redis order log
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
type OrderLogHandler struct {
	db      *bun.DB
	rdb     redis.UniversalClient
	log     *slog.Logger
	now     func() time.Time
	attempt time.Duration // AttemptTimeout
	// persisted counts the orders this handler inserted (as
	// flashsale_orders_persisted_total does for the process), so that the
	// shutdown log can say how many reached the database while draining.
	persisted atomic.Int64
}

// NewOrderLogHandler returns the handler of the order log's batches.
func NewOrderLogHandler(db *bun.DB, rdb redis.UniversalClient, log *slog.Logger, opts BatchOptions) *OrderLogHandler {
	opts = opts.withDefaults()
	return &OrderLogHandler{db: db, rdb: rdb, log: log, now: time.Now, attempt: opts.AttemptTimeout}
}

// Persisted counts the orders this handler has inserted since it was made.
func (h *OrderLogHandler) Persisted() int64 { return h.persisted.Load() }

// pendingOrder is an order of the batch being handled; bad is set once it
// is refused for good.
type pendingOrder struct {
	orderEntry
	bad *domain.Refusal
}

// Handle persists a batch of order-log entries (see persist) and returns
// the entries refused for good: malformed ones, and those the database
// proves cannot exist.
func (h *OrderLogHandler) Handle(ctx context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error) {
	began := time.Now()
	writeBatchSize.Observe(float64(len(batch)))
	defer func() { writeDuration.Observe(time.Since(began).Seconds()) }()
	now := h.now().UTC()
	entries := make([]pendingOrder, len(batch))
	for i, e := range batch {
		oe, err := decodeOrderEntry(e.Values, now)
		entries[i].orderEntry = oe
		if err != nil {
			entries[i].bad = refuse(DeadMalformed, err)
		}
	}
	err := h.persist(ctx, entries)
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
	announceOrders(ctx, h.rdb, h.log, recorded)
	return refused, err
}

// persist inserts a batch in one transaction: the orders (replays of
// orders already there are skipped), the stock they take and their ledger
// rows. If the database refuses the batch for a constraint (an order that
// cannot exist: over the per-user slot, past the stock, an id already used
// by another order), it retries order by order and marks the refused ones
// bad, so that one impossible order never blocks the others. Any other
// error is returned and the whole batch is retried later.
func (h *OrderLogHandler) persist(ctx context.Context, entries []pendingOrder) error {
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
	err := h.attemptInsert(ctx, rows, byID)
	if err == nil || !isConstraintViolation(err) {
		return err
	}
	h.log.WarnContext(ctx, "database refused a batch of orders; retrying them one by one", "orders", len(rows), "err", err)
	for _, row := range rows {
		if byID[row.ID][0].bad != nil {
			continue // refused while the batch was tried (a lost load)
		}
		err := h.attemptInsert(ctx, []orderRow{row}, byID)
		if isConstraintViolation(err) {
			reason := refusalReason(err)
			h.log.WarnContext(ctx, "database refused an order", "order", row.ID, "reason", reason, "err", err)
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
func (h *OrderLogHandler) attemptInsert(ctx context.Context, rows []orderRow, byID map[int64][]*pendingOrder) error {
	for {
		actx, cancel := context.WithTimeout(ctx, h.attempt)
		err := h.db.RunInTx(actx, nil, func(ctx context.Context, tx bun.Tx) error {
			return h.insertOrders(ctx, tx, rows, byID)
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

// insertOrders writes rows in tx: one multi-row insert (a replayed id is
// skipped), the stock the inserted ones take, per voucher in id order (so
// concurrent writers lock rows in the same order), the live orders they
// add to their users' counters (whose CHECK refuses an order past the
// user's limit), and their ledger rows. A skipped id whose stored order
// differs is an id collision: its entries are marked bad rather than
// silently dropped.
func (h *OrderLogHandler) insertOrders(ctx context.Context, tx bun.Tx, rows []orderRow, byID map[int64][]*pendingOrder) error {
	ids := make([]int64, 0, 1)
	for _, r := range rows {
		if !slices.Contains(ids, r.VoucherID) {
			ids = append(ids, r.VoucherID)
		}
	}
	locked, err := lockSeckillRows(ctx, tx, ids)
	if err != nil {
		return err
	}
	// The voucher's seckill row, locked above, is the guard of the
	// voucher's existence: the order tables have no foreign key (migration
	// 20261123000001: three per-row key checks were about a third of an
	// order's database CPU). Only a seckill row gives a limit (at least 1;
	// a Redis load alone gives none).
	unknown := &refusedOrders{reason: DeadUnknownVoucher, ids: map[int64]bool{}}
	for _, r := range rows {
		if locked[r.VoucherID].limit < 1 {
			unknown.ids[r.ID] = true
		}
	}
	if len(unknown.ids) > 0 {
		return unknown
	}
	inserted, err := insertOrderRows(ctx, tx, rows)
	if err != nil {
		return fmt.Errorf("insert %d orders: %w", len(rows), err)
	}
	if len(inserted) < len(rows) {
		if err := h.checkReplays(ctx, tx, rows, inserted, byID); err != nil {
			return err
		}
	}
	if len(inserted) == 0 {
		return nil
	}
	rowByID := make(map[int64]*orderRow, len(rows))
	for i := range rows {
		rowByID[rows[i].ID] = &rows[i]
	}
	perVoucher := map[int64]int{}
	perUser := map[[2]int64]int{}
	ledger := make([]ledgerRow, 0, len(inserted))
	for _, id := range inserted {
		o := rowByID[id]
		perVoucher[o.VoucherID]++
		perUser[[2]int64{o.VoucherID, o.UserID}]++
		ref := o.ID
		ledger = append(ledger, ledgerRow{VoucherID: o.VoucherID, Delta: -1, Reason: ReasonSale, RefID: &ref, CreateTime: o.CreateTime})
	}
	vouchers := make([]int64, 0, len(perVoucher))
	for v := range perVoucher {
		vouchers = append(vouchers, v)
	}
	sort.Slice(vouchers, func(i, j int) bool { return vouchers[i] < vouchers[j] })
	for _, v := range vouchers {
		n := perVoucher[v]
		if _, err := tx.NewUpdate().Table("tb_seckill_voucher").Set("stock = stock - ?", n).Where("voucher_id = ?", v).Exec(ctx); err != nil {
			return fmt.Errorf("take %d units of voucher %d: %w", n, v, err)
		}
	}
	if err := addLiveOrders(ctx, tx, perUser, locked); err != nil {
		return err
	}
	if err := insertLedgerRows(ctx, tx, ledger); err != nil {
		return fmt.Errorf("insert ledger rows: %w", err)
	}
	if err := h.adopt(ctx, inserted, rowByID, byID, locked); err != nil {
		return err
	}
	ordersPersisted.Add(float64(len(inserted)))
	h.persisted.Add(int64(len(inserted)))
	return nil
}

// checkReplays compares the orders a batch did not insert with the rows
// already stored under their ids: the same order (the whole entry) is a
// harmless replay, another order is an id collision, even for the same
// user and voucher.
func (h *OrderLogHandler) checkReplays(ctx context.Context, tx bun.Tx, rows []orderRow, inserted []int64, byID map[int64][]*pendingOrder) error {
	done := make(map[int64]bool, len(inserted))
	for _, id := range inserted {
		done[id] = true
	}
	var skipped []int64
	for _, r := range rows {
		if !done[r.ID] {
			skipped = append(skipped, r.ID)
		}
	}
	var stored []orderRow
	if err := tx.NewSelect().Model(&stored).Column("id", "user_id", "voucher_id", "create_time", "request_id").Where("id IN (?)", bun.In(skipped)).Scan(ctx); err != nil {
		return fmt.Errorf("check replayed orders: %w", err)
	}
	for _, st := range stored {
		for _, e := range byID[st.ID] {
			if !sameOrder(e.order, st) {
				e.bad = refuse(DeadIDCollision, fmt.Errorf("order id %d already belongs to another order: stored %s, log entry %s", st.ID, describeOrder(st), describeOrder(e.order)))
			}
		}
	}
	return nil
}

// Adoption: orders sold from an earlier Redis load of a voucher than the
// one the database recorded, returned to the reloaded stock by the
// handler's transaction (see Stock.Preheat for the orders a reload counts
// itself).

// adoptOrdersScript returns orders a reload missed to its stock: scripts/adopt_orders.lua.
var adoptOrdersScript = newScript("adopt_orders")

// adopt handles the orders of this transaction that were sold from an
// earlier Redis load of their voucher than the one the database recorded:
// Redis lost the voucher and reloaded it from the database while these
// orders were on their way, so the reload may not have counted them. It
// runs inside the transaction, before the commit, so that a crash cannot
// persist an order and forget to adopt it; a retried transaction adopts
// nothing twice. Orders that can no longer be adopted abort the
// transaction with refusedOrders: they are dead-lettered, never persisted
// beside units that were sold again.
func (h *OrderLogHandler) adopt(ctx context.Context, inserted []int64, rowByID map[int64]*orderRow, byID map[int64][]*pendingOrder, locked map[int64]lockedVoucher) error {
	perVoucher := map[int64][]any{}
	for _, id := range inserted {
		o := rowByID[id]
		stamp, cur := byID[id][0].stamp, locked[o.VoucherID].stamp
		if stamp == "" || cur == "" || stamp == cur {
			continue
		}
		perVoucher[o.VoucherID] = append(perVoucher[o.VoucherID], o.ID, o.UserID, deref(o.RequestID))
	}
	lost := &refusedOrders{reason: DeadLostLoad, ids: map[int64]bool{}}
	for v, triples := range perVoucher {
		args := append([]any{locked[v].stamp}, triples...)
		keys := []string{metaKey(v), stockKey(v), usersKey(v), adoptedKey(v), reqKey(v)}
		res, err := adoptOrdersScript.Run(ctx, h.rdb, keys, args...).Int64Slice()
		if err != nil || len(res) != 1 {
			return fmt.Errorf("return %d orders of voucher %d to its reloaded stock: %v %w", len(triples)/3, v, res, err)
		}
		switch n := res[0]; {
		case n == -1:
			h.log.WarnContext(ctx, "redis held an unrecorded load of the voucher; removed it so that it reloads with these orders",
				"voucher", v, "orders", len(triples)/3)
		case n < -1:
			for i := 0; i < len(triples); i += 3 {
				lost.ids[triples[i].(int64)] = true
			}
		case n > 0:
			ordersAdopted.Add(float64(n))
			h.log.WarnContext(ctx, "orders sold before redis reloaded the voucher were returned to its stock", "voucher", v, "orders", n)
		}
	}
	if len(lost.ids) > 0 {
		return lost
	}
	return nil
}

// DeadLetter records refused order-log entries, with their reasons, in
// tb_order_dead_letter (the persistence actor calls it before it acknowledges
// them, under one attempt's deadline; a replayed entry is recorded once,
// by its key).
func (h *OrderLogHandler) DeadLetter(ctx context.Context, dead []domain.DeadEntry) error {
	rows := make([]deadLetterRow, 0, len(dead))
	now := h.now().UTC()
	for _, d := range dead {
		e := d.Entry
		raw, _ := json.Marshal(e.Values)
		row := deadLetterRow{
			Key: e.Log + "/" + e.ID, Reason: d.Why.Reason, Detail: d.Why.Err.Error(), Entry: string(raw), CreateTime: now,
		}
		if stamp, _ := e.Values[EntryLoadStamp].(string); stamp != "" {
			row.LoadStamp = &stamp
		}
		if oe, err := decodeOrderEntry(e.Values, now); err == nil && row.Reason != DeadMalformed {
			o := oe.order
			row.OrderID, row.UserID, row.VoucherID, row.RequestID = &o.ID, &o.UserID, &o.VoucherID, o.RequestID
		} else if id, ok := voucherIDFromKey(e.Log); ok {
			row.VoucherID = &id // the log it came from still says whose it was
		}
		rows = append(rows, row)
		h.log.ErrorContext(ctx, "order refused by the database, dead-lettered",
			"log", e.Log, "entry", e.ID, "reason", row.Reason, "detail", row.Detail)
	}
	return insertDeadLetters(ctx, h.db, rows)
}

// unregisterLogScript unregisters an order log not registered again since: scripts/unregister_log.lua.
var unregisterLogScript = newScript("unregister_log")

// logFinishedScript tells whether an order log is finished: scripts/log_finished.lua.
var logFinishedScript = newScript("log_finished")

// Prune drops finished order logs from the registry, so that the writer's
// reads, claims and lag probes do not grow with every voucher ever sold.
// A later preheat of the voucher registers its log again. It returns how
// many it dropped; errors only postpone pruning.
//
// The check (in the voucher's slot) and the unregistering (in the
// registry's) cannot be one script, and a log may come back to life
// between them: the voucher is preheated again (metadata written, then the
// log registered) and sells. So prune reads each log's generation first,
// then checks, then unregisters only if the generation is unchanged. A
// registration after that read either precedes the unregistering (the
// generation differs: nothing is removed) or follows it (the log is
// registered again); a registration before the read follows its preheat,
// which the check then sees. Nothing appends to a finished log until a
// preheat writes the metadata again, and that preheat's registration falls
// in the first two cases. So a log that can receive orders is missing from
// the registry at most between a preheat's script and that preheat's own
// registration, as a new voucher's log is (docs/DECISIONS.md).
func (h *OrderLogHandler) Prune(ctx context.Context, logs []string) int {
	if len(logs) == 0 {
		return 0
	}
	gens, err := h.rdb.HMGet(ctx, orderLogGensKey, logs...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0
	}
	n := 0
	for i, s := range logs {
		id, ok := voucherIDFromKey(s)
		if !ok || i >= len(gens) {
			continue
		}
		gen, _ := gens[i].(string) // nil: registered without a generation
		done, err := logFinishedScript.Run(ctx, h.rdb, []string{metaKey(id), s}).Int()
		if err != nil || done != 1 {
			continue
		}
		removed, err := unregisterLogScript.Run(ctx, h.rdb, []string{orderLogsKey, orderLogGensKey}, s, gen).Int()
		if err != nil {
			continue
		}
		if removed == 1 {
			n++
		} else {
			h.log.InfoContext(ctx, "kept an order log registered again while it was being pruned", "log", s)
		}
	}
	return n
}
