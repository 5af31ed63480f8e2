package persistence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
)

// orderRow is a tb_voucher_order row.
type orderRow struct {
	bun.BaseModel `bun:"table:tb_voucher_order"`

	ID         int64              `bun:"id,pk"`
	UserID     int64              `bun:"user_id,notnull"`
	VoucherID  int64              `bun:"voucher_id,notnull"`
	Status     domain.OrderStatus `bun:"status,notnull"`
	Slot       *int               `bun:"slot"`
	CreateTime time.Time          `bun:"create_time,notnull"`
	PayTime    *time.Time         `bun:"pay_time"`
	RequestID  *string            `bun:"request_id"`
	CancelTime *time.Time         `bun:"cancel_time"`
	UpdateTime time.Time          `bun:"update_time,notnull"`
}

// OrderWriterOptions tunes the OrderWriter; zero values take defaults.
type OrderWriterOptions struct {
	// Consumer names this writer in the consumer group: the node's stable
	// identity (NODE_ID), so that after a restart it re-reads the entries
	// it left pending at once. Never shared by two running processes (see
	// Acquire). Empty takes a name of its own for this process only.
	Consumer string
	// Batch is how many log entries are read and inserted at once.
	Batch int
	// Block is how long one read waits for new entries.
	Block time.Duration
	// ClaimIdle is how long an entry must sit unacknowledged with another
	// consumer before this one takes it over (that consumer is presumed
	// dead).
	ClaimIdle time.Duration
	// ClaimEvery is how often pending entries of others are examined.
	ClaimEvery time.Duration
	// MaxBackoff caps the wait between retries while Postgres fails.
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

func (o OrderWriterOptions) withDefaults() OrderWriterOptions {
	if o.Consumer == "" {
		o.Consumer = "writer-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.Block <= 0 {
		o.Block = 200 * time.Millisecond
	}
	if o.ClaimIdle <= 0 {
		o.ClaimIdle = ClaimIdleDefault
	}
	if o.ClaimEvery <= 0 {
		o.ClaimEvery = o.ClaimIdle / 3
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = AttemptTimeoutDefault
	}
	if o.ConsumerLease <= 0 {
		o.ConsumerLease = 10 * time.Second
	}
	if o.DeadConsumerIdle <= 0 {
		o.DeadConsumerIdle = 10 * time.Minute
	}
	return o
}

// AttemptTimeoutDefault bounds one database attempt of the order writer.
const AttemptTimeoutDefault = 4 * time.Second

// ClaimIdleDefault is OrderWriterOptions.ClaimIdle's default (and
// ORDER_LOG_CLAIM_IDLE's).
const ClaimIdleDefault = 30 * time.Second

var (
	orderLogLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "order_log_lag",
		Help: "Orders accepted in Redis and not yet committed to the database (all order-log streams).",
	})
	ordersPersisted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "orders_persisted_total",
		Help: "Orders inserted into tb_voucher_order by the order writer.",
	})
	orderWriteErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "order_write_errors_total",
		Help: "Failed attempts to commit a batch of orders (retried with backoff).",
	})
)

func init() { prometheus.MustRegister(orderLogLag, ordersPersisted, orderWriteErrors) }

// OrderWriter moves accepted orders from the Redis order log into
// tb_voucher_order: it reads hundreds of entries at a time as one consumer
// of the group, inserts them with one multi-row INSERT ... ON CONFLICT DO
// NOTHING, takes the inserted ones off tb_seckill_voucher.stock and writes
// their ledger rows in the same transaction, commits, and only then
// acknowledges and deletes the entries. A crash before the acknowledgement
// replays the batch, and the conflict clause makes the replay a no-op, so
// every order lands exactly once. Entries left pending by a dead consumer
// are taken over after ClaimIdle.
//
// It is a single goroutine loop rather than a protoactor actor: its work is
// blocking reads and transactions, which would only stall a mailbox.
type OrderWriter struct {
	db   *bun.DB
	rdb  redis.UniversalClient
	opts OrderWriterOptions
	log  *slog.Logger
	now  func() time.Time
	// lease is the value of our lease on the consumer name, once Acquire
	// took it; Run refreshes it.
	lease string
}

// NewOrderWriter returns a writer; Run drives it.
func NewOrderWriter(db *bun.DB, rdb redis.UniversalClient, log *slog.Logger, opts OrderWriterOptions) *OrderWriter {
	return &OrderWriter{db: db, rdb: rdb, opts: opts.withDefaults(), log: log, now: time.Now}
}

// logEntry is one order of the log. bad is set for an entry that can
// never be persisted (malformed): it goes to the dead-letter stream.
type logEntry struct {
	stream string
	id     string
	values map[string]any
	order  orderRow
	// life is the stamp of the Redis load the order was sold from ("" for
	// entries written before stamps existed).
	life string
	bad  error
}

// Run persists orders until ctx ends. It never drops an entry: a failed
// batch is retried, with backoff, until it commits or ctx ends.
func (w *OrderWriter) Run(ctx context.Context) error {
	defer w.keepLease(ctx)()
	var (
		streams    []string
		lastList   time.Time
		lastClaim  time.Time
		ownPending = true // at start, re-read what this consumer name left unacknowledged
		backoff    = 50 * time.Millisecond
	)
	for ctx.Err() == nil {
		var err error
		if time.Since(lastList) > time.Second || len(streams) == 0 {
			if streams, err = w.streams(ctx); err != nil {
				w.pause(ctx, &backoff, "list order logs", err)
				continue
			}
			lastList = time.Now()
			// Our own pending list holds nothing between batches, except
			// deliveries whose reply was lost. A failed read says so below,
			// but go-redis retries a read on a broken connection by itself
			// (MaxRetries), and then the loss is silent: look once a second.
			ownPending = true
			if len(streams) == 0 {
				sleep(ctx, w.opts.Block)
				continue
			}
		}
		var entries []logEntry
		switch {
		case time.Since(lastClaim) > w.opts.ClaimEvery:
			entries, err = w.claim(ctx, streams)
			if err == nil {
				lastClaim = time.Now()
				if n := w.prune(ctx, streams); n > 0 {
					lastList = time.Time{} // list again without the pruned ones
				}
				w.removeDeadConsumers(ctx, streams)
			}
		case ownPending:
			entries, err = w.read(ctx, streams, "0", 0)
			if err == nil && len(entries) == 0 {
				ownPending = false
			}
		default:
			entries, err = w.read(ctx, streams, ">", w.opts.Block)
		}
		if err != nil {
			// Redis may have run the read and lost only its reply (a
			// dropped connection, or a kill after the append-only file
			// took the delivery): the entries then sit in our pending
			// list, which only a claim after ClaimIdle would find. The
			// list of logs may be stale too (Redis lost its data).
			ownPending = true
			lastList = time.Time{}
			w.pause(ctx, &backoff, "read order log", err)
			continue
		}
		if len(entries) == 0 {
			continue
		}
		for ctx.Err() == nil {
			if err = w.persist(ctx, entries); err == nil {
				break
			}
			orderWriteErrors.Inc()
			w.pause(ctx, &backoff, "persist orders", err)
		}
		if err != nil {
			return nil // ctx ended; the entries stay pending for the next run
		}
		if err = w.deadLetter(ctx, entries); err != nil {
			ownPending = true // committed rows replay as no-ops
			w.pause(ctx, &backoff, "dead-letter orders", err)
			continue
		}
		if err = w.ack(ctx, entries); err != nil {
			// Committed but not acknowledged: they come back as our own
			// pending entries and are replayed as no-ops.
			ownPending = true
			w.pause(ctx, &backoff, "acknowledge orders", err)
			continue
		}
		backoff = 50 * time.Millisecond
		w.updateLag(ctx, streams)
	}
	return nil
}

func (w *OrderWriter) pause(ctx context.Context, backoff *time.Duration, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	w.log.WarnContext(ctx, "order writer retrying", "step", what, "err", err, "backoff", backoff.String())
	sleep(ctx, *backoff)
	*backoff = min(*backoff*2, w.opts.MaxBackoff)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *OrderWriter) streams(ctx context.Context) ([]string, error) {
	s, err := w.rdb.SMembers(ctx, orderLogsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("list order logs: %w", err)
	}
	sort.Strings(s)
	return s, nil
}

// read reads entries of all streams: id "0" re-reads this consumer's own
// pending entries, ">" new ones (blocking up to block).
func (w *OrderWriter) read(ctx context.Context, streams []string, id string, block time.Duration) ([]logEntry, error) {
	args := make([]string, 0, 2*len(streams))
	args = append(args, streams...)
	for range streams {
		args = append(args, id)
	}
	if block == 0 {
		block = -1 // no BLOCK argument
	}
	res, err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: OrderLogGroup, Consumer: w.opts.Consumer, Streams: args, Count: int64(w.opts.Batch), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if isNoGroup(err) {
			if err := w.ensureGroups(ctx); err != nil {
				return nil, err
			}
			return nil, errStaleList
		}
		return nil, fmt.Errorf("xreadgroup: %w", err)
	}
	var out []logEntry
	for _, s := range res {
		out = w.appendEntries(ctx, out, s.Stream, s.Messages)
	}
	return out, nil
}

// claim takes over entries that other consumers left pending too long.
func (w *OrderWriter) claim(ctx context.Context, streams []string) ([]logEntry, error) {
	var out []logEntry
	for _, s := range streams {
		start := "0-0"
		for len(out) < w.opts.Batch {
			msgs, next, err := w.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
				Stream: s, Group: OrderLogGroup, Consumer: w.opts.Consumer,
				MinIdle: w.opts.ClaimIdle, Start: start, Count: int64(w.opts.Batch - len(out)),
			}).Result()
			if err != nil {
				if isNoGroup(err) {
					break
				}
				return nil, fmt.Errorf("xautoclaim %s: %w", s, err)
			}
			out = w.appendEntries(ctx, out, s, msgs)
			if next == "0-0" || len(msgs) == 0 {
				break
			}
			start = next
		}
	}
	if len(out) > 0 {
		w.log.InfoContext(ctx, "took over orders left by another writer", "orders", len(out))
	}
	return out, nil
}

func isNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

// errStaleList says a read met a stream without its group: the list of
// order logs is listed again before the next read.
var errStaleList = errors.New("an order log has no consumer group; listing the order logs again")

// ensureGroups creates missing consumer groups, and the stream if it is
// missing, for the order logs registered now (a voucher's preheat creates
// both; this covers a stream Redis lost or that was created otherwise). It
// reads the registry afresh: the writer's own list may predate a loss of
// Redis's data, and creating those streams again would leave empty,
// unregistered logs of vouchers Redis no longer knows.
func (w *OrderWriter) ensureGroups(ctx context.Context) error {
	streams, err := w.streams(ctx)
	if err != nil {
		return err
	}
	for _, s := range streams {
		err := w.rdb.XGroupCreateMkStream(ctx, s, OrderLogGroup, "0").Err()
		if err != nil && !isBusyGroup(err) {
			return fmt.Errorf("create group on %s: %w", s, err)
		}
	}
	return nil
}

func isBusyGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP") }

func (w *OrderWriter) appendEntries(_ context.Context, out []logEntry, stream string, msgs []redis.XMessage) []logEntry {
	now := w.now().UTC()
	for _, m := range msgs {
		o, err := parseOrder(m.Values, now)
		life, _ := m.Values["l"].(string)
		e := logEntry{stream: stream, id: m.ID, values: m.Values, order: o, life: life}
		if err != nil {
			e.bad = refuse(DeadMalformed, err)
		}
		out = append(out, e)
	}
	return out
}

func parseOrder(v map[string]any, now time.Time) (orderRow, error) {
	field := func(k string) (int64, error) {
		s, _ := v[k].(string)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %s=%q", k, s)
		}
		return n, nil
	}
	var o orderRow
	var err error
	var ms, slot int64
	if o.ID, err = field("o"); err != nil {
		return o, err
	}
	if o.UserID, err = field("u"); err != nil {
		return o, err
	}
	if o.VoucherID, err = field("v"); err != nil {
		return o, err
	}
	if ms, err = field("t"); err != nil {
		return o, err
	}
	if slot, err = field("s"); err != nil {
		return o, err
	}
	if slot > 0 {
		s := int(slot)
		o.Slot = &s
	}
	if r, _ := v["r"].(string); r != "" {
		o.RequestID = &r
	}
	o.Status = domain.OrderUnpaid
	o.CreateTime = time.UnixMilli(ms).UTC()
	o.UpdateTime = now
	return o, nil
}

// persist inserts a batch in one transaction: the orders (replays of
// orders already there are skipped), the stock they take and their ledger
// rows. If the database refuses the batch for a constraint (an order that
// cannot exist: over the per-user slot, past the stock, an id already used
// by another order), it retries order by order and marks the refused ones
// bad, so that one impossible order never blocks the others. Any other
// error is returned and the whole batch is retried later.
func (w *OrderWriter) persist(ctx context.Context, entries []logEntry) error {
	rows := make([]orderRow, 0, len(entries))
	byID := make(map[int64][]*logEntry, len(entries))
	for i := range entries {
		e := &entries[i]
		if e.bad != nil {
			continue
		}
		if same := byID[e.order.ID]; len(same) > 0 { // a claim and a read may overlap
			if first := same[0].order; !sameOrder(first, e.order) {
				e.bad = refuse(DeadIDCollision, fmt.Errorf("order id %d used twice in the log (%s and %s)", e.order.ID, describeOrder(first), describeOrder(e.order)))
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
	err := w.attempt(ctx, rows, byID)
	if err == nil || !isConstraintViolation(err) {
		return err
	}
	w.log.WarnContext(ctx, "database refused a batch of orders; retrying them one by one", "orders", len(rows), "err", err)
	for _, row := range rows {
		if byID[row.ID][0].bad != nil {
			continue // refused while the batch was tried (a lost load)
		}
		err := w.attempt(ctx, []orderRow{row}, byID)
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

// attempt runs one transaction inserting rows, under its own deadline.
// Orders that adopt refuses (sold from a lost Redis load, see adopt) are
// marked bad and the transaction is tried again without them.
func (w *OrderWriter) attempt(ctx context.Context, rows []orderRow, byID map[int64][]*logEntry) error {
	for {
		actx, cancel := context.WithTimeout(ctx, w.opts.AttemptTimeout)
		err := w.db.RunInTx(actx, nil, func(ctx context.Context, tx bun.Tx) error {
			return w.insertOrders(ctx, tx, rows, byID)
		})
		cancel()
		var lost *lostOrders
		if !errors.As(err, &lost) {
			return err
		}
		keep := rows[:0:0]
		for _, r := range rows {
			if lost.ids[r.ID] {
				for _, e := range byID[r.ID] {
					e.bad = refuse(DeadLostLoad, fmt.Errorf("order %d was sold from a Redis load of voucher %d that was lost, "+
						"and the reload from the database already sells again", r.ID, r.VoucherID))
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

// lostOrders aborts a transaction holding orders that can no longer be
// returned to their voucher's reloaded stock.
type lostOrders struct{ ids map[int64]bool }

func (l *lostOrders) Error() string {
	return fmt.Sprintf("%d orders of a lost redis load can no longer be taken back", len(l.ids))
}

// insertOrders writes rows in tx: one multi-row insert (a replayed id is
// skipped), the stock the inserted ones take, per voucher in id order (so
// concurrent writers lock rows in the same order), the live orders they
// add to their users' counters (whose CHECK refuses an order past the
// user's limit), and their ledger rows. A skipped id whose stored order
// differs is an id collision: its entries are marked bad rather than
// silently dropped.
func (w *OrderWriter) insertOrders(ctx context.Context, tx bun.Tx, rows []orderRow, byID map[int64][]*logEntry) error {
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
	var inserted []int64
	err = tx.NewInsert().Model(&rows).On("CONFLICT (id) DO NOTHING").Returning("id").Scan(ctx, &inserted)
	if err != nil {
		return fmt.Errorf("insert %d orders: %w", len(rows), err)
	}
	if len(inserted) < len(rows) {
		if err := w.checkReplays(ctx, tx, rows, inserted, byID); err != nil {
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
	if _, err := tx.NewInsert().Model(&ledger).On("CONFLICT DO NOTHING").Exec(ctx); err != nil {
		return fmt.Errorf("insert ledger rows: %w", err)
	}
	if err := w.adopt(ctx, inserted, rowByID, byID, locked); err != nil {
		return err
	}
	ordersPersisted.Add(float64(len(inserted)))
	return nil
}

// voucherUserRow is a tb_voucher_user row: a user's live orders of a
// voucher, never above the voucher's limit (a CHECK).
type voucherUserRow struct {
	bun.BaseModel `bun:"table:tb_voucher_user"`

	VoucherID    int64 `bun:"voucher_id,pk"`
	UserID       int64 `bun:"user_id,pk"`
	Live         int   `bun:"live,notnull"`
	PerUserLimit int   `bun:"per_user_limit,notnull"`
}

// addLiveOrders adds new live orders to their users' counters, in key
// order (concurrent writers take row locks in the same order).
func addLiveOrders(ctx context.Context, tx bun.Tx, perUser map[[2]int64]int, locked map[int64]lockedVoucher) error {
	rows := make([]voucherUserRow, 0, len(perUser))
	for k, n := range perUser {
		rows = append(rows, voucherUserRow{VoucherID: k[0], UserID: k[1], Live: n, PerUserLimit: locked[k[0]].limit})
	}
	slices.SortFunc(rows, func(a, b voucherUserRow) int {
		return cmp.Or(cmp.Compare(a.VoucherID, b.VoucherID), cmp.Compare(a.UserID, b.UserID))
	})
	_, err := tx.NewInsert().Model(&rows).
		On("CONFLICT (voucher_id, user_id) DO UPDATE").Set("live = ?TableAlias.live + EXCLUDED.live").
		Exec(ctx)
	if err != nil {
		return fmt.Errorf("count live orders of %d users: %w", len(rows), err)
	}
	return nil
}

// adoptScript puts orders that a reload of the voucher's stock could not
// count back into Redis: orders sold from an earlier load that were in no
// order log when the reload ran, because an order writer was holding them
// in an attempt to commit (see Stock.Preheat, which counts those still in
// the log). It takes their units off the stock, counts them for their
// users and remembers their request ids, once per order (the adopted set
// makes a replayed batch a no-op), and only
//   - while Redis holds the load the database recorded; any other load is
//     one whose stamp never got recorded (its transaction failed), and is
//     removed so that the next activation reloads from the database, which
//     holds these orders once this transaction commits;
//   - while the reload still holds its sales (meta 'hold', Redis time), so
//     no unit of these orders can have been sold again; later, they are
//     refused, never sold twice;
//   - if the stock covers them all.
//
// KEYS: meta, stock, users, adopted, req. ARGV: life, then (order, user,
// request id or "") triples. Returns {adopted}, or {-1} another load was
// removed, {-2} the hold is over, {-3} the stock does not cover them.
var adoptScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'life') ~= ARGV[1] then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
    redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
  end
  return {-1}
end
local fresh = {}
for i = 2, #ARGV, 3 do
  if redis.call('SISMEMBER', KEYS[4], ARGV[i]) == 0 then
    fresh[#fresh + 1] = i
  end
end
if #fresh == 0 then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(redis.call('HGET', KEYS[1], 'hold') or '0') then
  return {-2}
end
if tonumber(redis.call('GET', KEYS[2]) or '0') < #fresh then
  return {-3}
end
for _, i in ipairs(fresh) do
  redis.call('SADD', KEYS[4], ARGV[i])
  redis.call('HINCRBY', KEYS[3], ARGV[i + 1], 1)
  if ARGV[i + 2] ~= '' then
    redis.call('HSET', KEYS[5], ARGV[i + 2], ARGV[i])
  end
end
redis.call('DECRBY', KEYS[2], #fresh)
local expire = redis.call('HGET', KEYS[1], 'expire')
if expire then
  redis.call('PEXPIREAT', KEYS[4], expire)
end
redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
return {#fresh}
`)

var ordersAdopted = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "flashsale", Name: "orders_adopted_total",
	Help: "Orders sold before Redis lost a voucher and reloaded it from the database, put back into the reloaded stock.",
})

func init() { prometheus.MustRegister(ordersAdopted) }

// adopt handles the orders of this transaction that were sold from an
// earlier Redis load of their voucher than the one the database recorded:
// Redis lost the voucher and reloaded it from the database while these
// orders were on their way, so the reload may not have counted them. It
// runs inside the transaction, before the commit, so that a crash cannot
// persist an order and forget to adopt it; a retried transaction adopts
// nothing twice. Orders that can no longer be adopted abort the
// transaction with lostOrders: they are dead-lettered, never persisted
// beside units that were sold again.
func (w *OrderWriter) adopt(ctx context.Context, inserted []int64, rowByID map[int64]*orderRow, byID map[int64][]*logEntry, locked map[int64]lockedVoucher) error {
	perVoucher := map[int64][]any{}
	for _, id := range inserted {
		o := rowByID[id]
		life, cur := byID[id][0].life, locked[o.VoucherID].life
		if life == "" || cur == "" || life == cur {
			continue
		}
		perVoucher[o.VoucherID] = append(perVoucher[o.VoucherID], o.ID, o.UserID, deref(o.RequestID))
	}
	lost := &lostOrders{ids: map[int64]bool{}}
	for v, triples := range perVoucher {
		args := append([]any{locked[v].life}, triples...)
		keys := []string{metaKey(v), stockKey(v), usersKey(v), adoptedKey(v), reqKey(v)}
		res, err := adoptScript.Run(ctx, w.rdb, keys, args...).Int64Slice()
		if err != nil || len(res) != 1 {
			return fmt.Errorf("return %d orders of voucher %d to its reloaded stock: %v %w", len(triples)/3, v, res, err)
		}
		switch n := res[0]; {
		case n == -1:
			w.log.WarnContext(ctx, "redis held an unrecorded load of the voucher; removed it so that it reloads with these orders",
				"voucher", v, "orders", len(triples)/3)
		case n < -1:
			for i := 0; i < len(triples); i += 3 {
				lost.ids[triples[i].(int64)] = true
			}
		case n > 0:
			ordersAdopted.Add(float64(n))
			w.log.WarnContext(ctx, "orders sold before redis reloaded the voucher were returned to its stock", "voucher", v, "orders", n)
		}
	}
	if len(lost.ids) > 0 {
		return lost
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// checkReplays compares the orders a batch did not insert with the rows
// already stored under their ids: the same order (the whole entry) is a
// harmless replay, another order is an id collision, even for the same
// user and voucher.
func (w *OrderWriter) checkReplays(ctx context.Context, tx bun.Tx, rows []orderRow, inserted []int64, byID map[int64][]*logEntry) error {
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
	if err := tx.NewSelect().Model(&stored).Column("id", "user_id", "voucher_id", "create_time").Where("id IN (?)", bun.In(skipped)).Scan(ctx); err != nil {
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

// sameOrder tells whether two rows are the same order: what a log entry
// fixes for good (user, voucher, the time the grab was accepted). Status,
// slot and update time change over an order's life, so a replay after a
// payment or cancellation still matches.
func sameOrder(a, b orderRow) bool {
	return a.UserID == b.UserID && a.VoucherID == b.VoucherID && a.CreateTime.Equal(b.CreateTime)
}

func describeOrder(o orderRow) string {
	return fmt.Sprintf("user %d, voucher %d, created %s", o.UserID, o.VoucherID, o.CreateTime.UTC().Format(time.RFC3339Nano))
}

// ackScript acknowledges and deletes entries of one stream atomically, so
// that no entry can stay in the stream once acknowledged.
var ackScript = redis.NewScript(`
redis.call('XACK', KEYS[1], '` + OrderLogGroup + `', unpack(ARGV))
return redis.call('XDEL', KEYS[1], unpack(ARGV))
`)

// ack acknowledges and deletes committed entries, so that a stream holds
// exactly the orders not yet in the database (reconciliation counts them).
func (w *OrderWriter) ack(ctx context.Context, entries []logEntry) error {
	ids := map[string][]string{}
	for _, e := range entries {
		ids[e.stream] = append(ids[e.stream], e.id)
	}
	pipe := w.rdb.Pipeline()
	for s, list := range ids {
		args := make([]any, len(list))
		for i, id := range list {
			args[i] = id
		}
		ackScript.Run(ctx, pipe, []string{s}, args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// A pipelined EVALSHA cannot fall back to EVAL by itself.
		if !isNoScript(err) {
			return fmt.Errorf("ack orders: %w", err)
		}
		if err := ackScript.Load(ctx, w.rdb).Err(); err != nil {
			return fmt.Errorf("ack orders: load script: %w", err)
		}
		return w.ack(ctx, entries)
	}
	return nil
}

func (w *OrderWriter) updateLag(ctx context.Context, streams []string) {
	pipe := w.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(streams))
	for i, s := range streams {
		cmds[i] = pipe.XLen(ctx, s)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return
	}
	var lag int64
	for _, c := range cmds {
		lag += c.Val()
	}
	orderLogLag.Set(float64(lag))
}

// InFlight counts a voucher's orders accepted in Redis but not yet
// committed to the database.
func InFlight(ctx context.Context, rdb redis.UniversalClient, voucherID int64) (int64, error) {
	n, err := rdb.XLen(ctx, LogKey(voucherID)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("order log length of voucher %d: %w", voucherID, err)
	}
	return n, nil
}

// WaitDrained waits until every order log is empty (all accepted orders
// committed), polling, or until ctx ends.
func (w *OrderWriter) WaitDrained(ctx context.Context) error {
	for {
		streams, err := w.streams(ctx)
		if err != nil {
			return err
		}
		var total int64
		for _, s := range streams {
			n, err := w.rdb.XLen(ctx, s).Result()
			if err != nil {
				return fmt.Errorf("order log length: %w", err)
			}
			total += n
		}
		if total == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d orders not yet persisted: %w", total, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
