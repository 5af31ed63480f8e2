package persistence

import (
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
		o.ClaimIdle = 30 * time.Second
	}
	if o.ClaimEvery <= 0 {
		o.ClaimEvery = o.ClaimIdle / 3
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.ConsumerLease <= 0 {
		o.ConsumerLease = 10 * time.Second
	}
	if o.DeadConsumerIdle <= 0 {
		o.DeadConsumerIdle = 10 * time.Minute
	}
	return o
}

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

// deadLetterKey is the stream of order-log entries the database refused
// for good (malformed, or a constraint says the order cannot exist): kept
// for an operator, with the reason, and counted by a metric. Reaching it
// means Redis and the database disagree (for example after Redis lost
// data), which reconciliation reports.
const deadLetterKey = "flashsale:order-dead"

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
		out = append(out, logEntry{stream: stream, id: m.ID, values: m.Values, order: o, life: life, bad: err})
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
			if first := same[0].order; first.UserID != e.order.UserID || first.VoucherID != e.order.VoucherID {
				e.bad = fmt.Errorf("order id %d used twice in the log (users %d and %d)", e.order.ID, first.UserID, e.order.UserID)
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
	err := w.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return w.insertOrders(ctx, tx, rows, byID)
	})
	if err == nil || !isConstraintViolation(err) {
		return err
	}
	w.log.WarnContext(ctx, "database refused a batch of orders; retrying them one by one", "orders", len(rows), "err", err)
	for _, row := range rows {
		err := w.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			return w.insertOrders(ctx, tx, []orderRow{row}, byID)
		})
		if isConstraintViolation(err) {
			for _, e := range byID[row.ID] {
				e.bad = fmt.Errorf("database refused order %d: %w", row.ID, err)
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// insertOrders writes rows in tx: one multi-row insert (a replayed id is
// skipped), the stock the inserted ones take, per voucher in id order (so
// concurrent writers lock rows in the same order), and their ledger rows.
// A skipped id whose stored order differs is an id collision: its entries
// are marked bad rather than silently dropped.
func (w *OrderWriter) insertOrders(ctx context.Context, tx bun.Tx, rows []orderRow, byID map[int64][]*logEntry) error {
	ids := make([]int64, 0, 1)
	for _, r := range rows {
		if !slices.Contains(ids, r.VoucherID) {
			ids = append(ids, r.VoucherID)
		}
	}
	lives, err := lockSeckillRows(ctx, tx, ids)
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
	ledger := make([]ledgerRow, 0, len(inserted))
	for _, id := range inserted {
		o := rowByID[id]
		perVoucher[o.VoucherID]++
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
	if _, err := tx.NewInsert().Model(&ledger).On("CONFLICT DO NOTHING").Exec(ctx); err != nil {
		return fmt.Errorf("insert ledger rows: %w", err)
	}
	if err := w.adopt(ctx, inserted, rowByID, byID, lives); err != nil {
		return err
	}
	ordersPersisted.Add(float64(len(inserted)))
	return nil
}

// adoptScript puts orders that a reload of the voucher's stock could not
// count back into Redis: it takes their units off the stock and counts
// them for their users, once per order (the adopted set makes a replayed
// batch a no-op), and only while Redis still holds the load the database
// recorded (a newer load read the orders from the database itself).
//
// KEYS: meta, stock, users, adopted. ARGV: life, then order/user pairs.
// Returns {adopted, shortfall}: shortfall units had already been sold
// again from the reload, {-1, 0} when Redis holds another load.
var adoptScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'life') ~= ARGV[1] then
  return {-1, 0}
end
local n = 0
for i = 2, #ARGV, 2 do
  if redis.call('SADD', KEYS[4], ARGV[i]) == 1 then
    redis.call('HINCRBY', KEYS[3], ARGV[i + 1], 1)
    n = n + 1
  end
end
local short = 0
if n > 0 then
  local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
  local take = math.min(n, math.max(stock, 0))
  short = n - take
  if take > 0 then
    redis.call('DECRBY', KEYS[2], take)
  end
  local expire = redis.call('HGET', KEYS[1], 'expire')
  if expire then
    redis.call('PEXPIREAT', KEYS[4], expire)
  end
  redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
end
return {n, short}
`)

var ordersAdopted = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "flashsale", Name: "orders_adopted_total",
	Help: "Orders sold before Redis lost a voucher and reloaded it from the database, put back into the reloaded stock.",
})

func init() { prometheus.MustRegister(ordersAdopted) }

// adopt handles the orders of this transaction that were sold from an
// earlier Redis load of their voucher than the one the database recorded
// (lives): Redis lost its data and a reload from the database happened
// before these orders were persisted, so the reload counted their units as
// free and their users as holding nothing. It runs inside the transaction,
// before the commit, so that a crash cannot persist an order and forget to
// adopt it; a retried transaction adopts nothing twice.
func (w *OrderWriter) adopt(ctx context.Context, inserted []int64, rowByID map[int64]*orderRow, byID map[int64][]*logEntry, lives map[int64]string) error {
	perVoucher := map[int64][]any{}
	for _, id := range inserted {
		o := rowByID[id]
		life, cur := byID[id][0].life, lives[o.VoucherID]
		if life == "" || cur == "" || life == cur {
			continue
		}
		perVoucher[o.VoucherID] = append(perVoucher[o.VoucherID], o.ID, o.UserID)
	}
	for v, pairs := range perVoucher {
		args := append([]any{lives[v]}, pairs...)
		res, err := adoptScript.Run(ctx, w.rdb, []string{metaKey(v), stockKey(v), usersKey(v), adoptedKey(v)}, args...).Int64Slice()
		if err != nil || len(res) != 2 {
			return fmt.Errorf("return %d orders of voucher %d to its reloaded stock: %v %w", len(pairs)/2, v, res, err)
		}
		if res[0] < 0 {
			// Redis holds another load than the database recorded: it lost
			// the voucher again (the next reload counts these orders from
			// the database, which has them once we commit), or a load's
			// stamp went unrecorded (catalog takes such a load back).
			w.log.WarnContext(ctx, "orders of an earlier load not returned: redis holds another load of the voucher", "voucher", v, "orders", len(pairs)/2)
		}
		if res[0] > 0 {
			ordersAdopted.Add(float64(res[0]))
			w.log.WarnContext(ctx, "orders sold before redis reloaded the voucher were returned to its stock", "voucher", v, "orders", res[0])
		}
		if res[1] > 0 {
			w.log.ErrorContext(ctx, "redis resold units of orders it lost; the database refuses the excess as past the stock",
				"voucher", v, "units", res[1])
		}
	}
	return nil
}

// checkReplays compares the orders a batch did not insert with the rows
// already stored under their ids: the same order is a harmless replay,
// another order is an id collision.
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
	if err := tx.NewSelect().Model(&stored).Column("id", "user_id", "voucher_id").Where("id IN (?)", bun.In(skipped)).Scan(ctx); err != nil {
		return fmt.Errorf("check replayed orders: %w", err)
	}
	for _, st := range stored {
		for _, e := range byID[st.ID] {
			if e.order.UserID != st.UserID || e.order.VoucherID != st.VoucherID {
				e.bad = fmt.Errorf("order id %d already belongs to user %d, voucher %d", st.ID, st.UserID, st.VoucherID)
			}
		}
	}
	return nil
}

var ordersDead = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "flashsale", Name: "orders_dead_total",
	Help: "Order-log entries the database refused for good, moved to " + deadLetterKey + ".",
})

func init() { prometheus.MustRegister(ordersDead) }

// deadLetter copies the bad entries of a batch, with their reason, to the
// dead-letter stream (before they are acknowledged).
func (w *OrderWriter) deadLetter(ctx context.Context, entries []logEntry) error {
	pipe := w.rdb.Pipeline()
	n := 0
	for _, e := range entries {
		if e.bad == nil {
			continue
		}
		values := map[string]any{"stream": e.stream, "entry": e.id, "reason": e.bad.Error()}
		for k, v := range e.values {
			values["f_"+k] = v
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: deadLetterKey, Values: values})
		w.log.ErrorContext(ctx, "order-log entry moved to the dead-letter stream", "stream", e.stream, "entry", e.id, "reason", e.bad.Error())
		n++
	}
	if n == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("dead-letter %d entries: %w", n, err)
	}
	ordersDead.Add(float64(n))
	return nil
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
