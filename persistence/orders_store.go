package persistence

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
)

// Kinds of tb_stock_pending rows.
const (
	pendingReturn  = "return"
	pendingRestock = "restock"
)

// pendingRow is a tb_stock_pending row: a stock change committed in the
// database that Redis may not have applied yet.
type pendingRow struct {
	bun.BaseModel `bun:"table:tb_stock_pending"`

	Kind       string    `bun:"kind,pk"`
	RefID      int64     `bun:"ref_id,pk"`
	VoucherID  int64     `bun:"voucher_id,notnull"`
	UserID     *int64    `bun:"user_id"`
	Delta      int       `bun:"delta,notnull"`
	Initial    int       `bun:"initial,notnull"`
	LoadStamp  string    `bun:"load_stamp,notnull"`
	CreateTime time.Time `bun:"create_time,notnull"`
}

// restockRow is a tb_restock row.
type restockRow struct {
	bun.BaseModel `bun:"table:tb_restock"`

	ID         int64     `bun:"id,pk"`
	VoucherID  int64     `bun:"voucher_id,notnull"`
	RequestKey string    `bun:"request_key,notnull"`
	Amount     int       `bun:"amount,notnull"`
	CreateTime time.Time `bun:"create_time,notnull"`
}

// Orders is the record of orders after the sale: reads, payment,
// cancellation (by the owner or after the pay deadline) and restocks, each
// a conditional change in the database whose stock effect then reaches
// Redis exactly once (tb_stock_pending and applyPendingScript).
type Orders struct {
	db  *bun.DB
	rdb redis.UniversalClient
	log *slog.Logger
}

// NewOrders returns the order store over the database and the stock Redis.
func NewOrders(db *bun.DB, rdb redis.UniversalClient, log *slog.Logger) *Orders {
	return &Orders{db: db, rdb: rdb, log: log}
}

func (r *orderRow) toOrder() domain.Order {
	o := domain.Order{ID: r.ID, UserID: r.UserID, VoucherID: r.VoucherID, Status: r.Status, CreatedAt: r.CreateTime.UTC()}
	if r.PayTime != nil {
		t := r.PayTime.UTC()
		o.PaidAt = &t
	}
	if r.CancelTime != nil {
		t := r.CancelTime.UTC()
		o.CancelledAt = &t
	}
	if r.CancelReason != nil {
		o.CancelReason = *r.CancelReason
	} else if r.Status == domain.OrderCancelled {
		o.CancelReason = domain.CancelByOwner
	}
	return o
}

// Get returns an order from the database or, if it is not there yet, from
// the order log (InFlight set); NOT_FOUND if neither holds it.
func (s *Orders) Get(ctx context.Context, id int64) (domain.Order, error) {
	row, err := s.row(ctx, s.db, id)
	if err == nil {
		return row.toOrder(), nil
	}
	if domain.ErrorCode(err) != domain.CodeNotFound {
		return domain.Order{}, err
	}
	o, err := s.findInLog(ctx, id)
	if domain.ErrorCode(err) != domain.CodeNotFound {
		return o, err
	}
	// The order writer commits an order before it takes it off the log: an
	// order that neither read saw was committed between the two.
	if row, err = s.row(ctx, s.db, id); err != nil {
		return domain.Order{}, err
	}
	return row.toOrder(), nil
}

func (s *Orders) row(ctx context.Context, db bun.IDB, id int64) (orderRow, error) {
	var row orderRow
	err := db.NewSelect().Model(&row).Where("id = ?", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return row, domain.OrderNotFound(id)
	}
	if err != nil {
		return row, fmt.Errorf("read order %d: %w", id, err)
	}
	return row, nil
}

// findInLog looks for an order the database does not hold yet in the order
// logs, around the second its id was allocated in (the id's high bits; an
// entry's id is Redis's clock, so the window allows for clock skew): a
// bounded read per registered log, in one pipelined round trip.
func (s *Orders) findInLog(ctx context.Context, id int64) (domain.Order, error) {
	const skew = 5 // seconds
	sec := id>>32 + orderIDEpoch
	logs, err := s.rdb.SMembers(ctx, orderLogsKey).Result()
	if err != nil {
		return domain.Order{}, fmt.Errorf("look for order %d in the order logs: %w", id, err)
	}
	if id <= 0 || len(logs) == 0 {
		return domain.Order{}, domain.OrderNotFound(id)
	}
	lo, hi := strconv.FormatInt((sec-skew)*1000, 10), strconv.FormatInt((sec+skew+1)*1000, 10)
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(logs))
	for i, l := range logs {
		cmds[i] = pipe.XRange(ctx, l, lo, hi)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return domain.Order{}, fmt.Errorf("look for order %d in the order logs: %w", id, err)
	}
	want := strconv.FormatInt(id, 10)
	for _, c := range cmds {
		for _, m := range c.Val() {
			if v, _ := m.Values[EntryOrderID].(string); v != want {
				continue
			}
			e, err := decodeOrderEntry(m.Values, time.Time{})
			if err != nil {
				continue
			}
			o := e.order.toOrder()
			o.InFlight = true
			return o, nil
		}
	}
	return domain.Order{}, domain.OrderNotFound(id)
}

// ListByUser returns a page of a user's orders in the database, newest
// first (ids are time-ordered), and whether a next page exists.
func (s *Orders) ListByUser(ctx context.Context, userID int64, page domain.Page) ([]domain.Order, bool, error) {
	var rows []orderRow
	q := s.db.NewSelect().Model(&rows).Where("user_id = ?", userID).OrderExpr("id DESC").Limit(int64(page.First + 1))
	if page.After > 0 {
		q = q.Where("id < ?", page.After)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, false, fmt.Errorf("list orders of user %d: %w", userID, err)
	}
	more := len(rows) > page.First
	rows = rows[:min(len(rows), page.First)]
	out := make([]domain.Order, len(rows))
	for i := range rows {
		out[i] = rows[i].toOrder()
	}
	return out, more, nil
}

// Pay marks the user's unpaid order paid, by a conditional update (status
// = unpaid): of a payment, an owner's cancellation and the pay-deadline
// cancellation racing for one order, exactly one wins, and the losers are
// told what happened. Paying a paid order again answers it unchanged (a
// retried payment).
func (s *Orders) Pay(ctx context.Context, id, userID int64, now time.Time) (domain.Order, error) {
	now = now.UTC()
	for {
		res, err := s.db.NewUpdate().Table("tb_voucher_order").
			Set("status = ?", domain.OrderPaid).Set("pay_time = ?", now).Set("update_time = ?", now).
			Where("id = ? AND user_id = ? AND status = ?", id, userID, domain.OrderUnpaid).
			Exec(ctx)
		if err != nil {
			return domain.Order{}, fmt.Errorf("pay order %d: %w", id, err)
		}
		row, err := s.row(ctx, s.db, id)
		if err != nil {
			return domain.Order{}, err
		}
		if row.UserID != userID {
			return domain.Order{}, domain.OrderNotFound(id)
		}
		if n, _ := res.RowsAffected(); n == 1 || row.Status == domain.OrderPaid {
			if n == 1 {
				announceOrders(ctx, s.rdb, s.log, []int64{id})
			}
			return row.toOrder(), nil
		}
		if row.Status != domain.OrderUnpaid {
			return domain.Order{}, notPayable(row)
		}
		// Unpaid, yet the update missed it: the order writer inserted it
		// between the two statements. The update decides again.
	}
}

func notPayable(row orderRow) error {
	return domain.OrderNotPayable(row.ID, row.Status, cancelReason(row))
}

func notCancellable(row orderRow) error {
	return domain.OrderNotCancellable(row.ID, row.Status, cancelReason(row))
}

func cancelReason(row orderRow) string {
	if row.CancelReason == nil {
		return ""
	}
	return *row.CancelReason
}

// Cancel cancels the user's unpaid order (see cancelBatch) and returns its
// unit and the user's slot to Redis. Cancelling an order its owner
// cancelled already answers it unchanged (a retried cancellation); a
// paid or timed-out order is BAD_USER_INPUT.
func (s *Orders) Cancel(ctx context.Context, id, userID int64, now time.Time) (domain.Order, error) {
	row, err := s.row(ctx, s.db, id)
	if err != nil {
		return domain.Order{}, err
	}
	if row.UserID != userID {
		return domain.Order{}, domain.OrderNotFound(id)
	}
	if row.Status == domain.OrderUnpaid {
		if _, err := s.cancel(ctx, row.VoucherID, []int64{id}, domain.CancelByOwner, now); err != nil {
			return domain.Order{}, err
		}
		if row, err = s.row(ctx, s.db, id); err != nil {
			return domain.Order{}, err
		}
	}
	if row.Status == domain.OrderCancelled && (row.CancelReason == nil || *row.CancelReason == domain.CancelByOwner) {
		return row.toOrder(), nil
	}
	return domain.Order{}, notCancellable(row)
}

// CancelDue cancels, with reason timeout, up to limit unpaid orders
// created before cutoff, oldest first, found through the partial index on
// unpaid orders' create_time (never a scan of all orders); it returns how
// many it cancelled. Orders paid or cancelled meanwhile are left alone by
// the conditional update.
func (s *Orders) CancelDue(ctx context.Context, cutoff time.Time, limit int, now time.Time) (int, error) {
	var due []struct {
		ID        int64 `bun:"id"`
		VoucherID int64 `bun:"voucher_id"`
	}
	err := s.db.NewSelect().Table("tb_voucher_order").Column("id", "voucher_id").
		Where("status = ? AND create_time < ?", domain.OrderUnpaid, cutoff.UTC()).
		OrderExpr("create_time").Limit(int64(limit)).Scan(ctx, &due)
	if err != nil {
		return 0, fmt.Errorf("find unpaid orders past their deadline: %w", err)
	}
	perVoucher := map[int64][]int64{}
	for _, d := range due {
		perVoucher[d.VoucherID] = append(perVoucher[d.VoucherID], d.ID)
	}
	total := 0
	for v, ids := range perVoucher {
		n, err := s.cancel(ctx, v, ids, domain.CancelTimeout, now)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// cancel runs cancelBatch and then applies its returns to Redis. If the
// apply fails, the committed pending rows stay for the sweeper.
func (s *Orders) cancel(ctx context.Context, voucherID int64, ids []int64, reason string, now time.Time) (int, error) {
	pending, err := s.cancelBatch(ctx, voucherID, ids, reason, now)
	if err != nil || len(pending) == 0 {
		return 0, err
	}
	cancelled := make([]int64, len(pending))
	for i, p := range pending {
		cancelled[i] = p.RefID
	}
	announceOrders(ctx, s.rdb, s.log, cancelled)
	if err := s.apply(ctx, voucherID, pending); err != nil {
		s.log.WarnContext(ctx, "cancelled orders' stock not yet back in redis; the sweeper retries", "voucher", voucherID, "orders", len(pending), "err", err)
	}
	return len(pending), nil
}

// cancelBatch cancels the voucher's orders among ids that are still unpaid,
// in one transaction under the voucher's row lock (serialised with the
// order writer, reloads and reconciliation): the conditional update
// (status = unpaid) decides every race, and only the orders it changed
// give back their unit in the database (stock, their users' live
// counters), get a ledger row, and get a pending row for Redis stamped
// with the Redis load the database records now.
func (s *Orders) cancelBatch(ctx context.Context, voucherID int64, ids []int64, reason string, now time.Time) ([]pendingRow, error) {
	now = now.UTC()
	var pending []pendingRow
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		pending = nil
		locked, err := lockSeckillRows(ctx, tx, []int64{voucherID})
		if err != nil {
			return err
		}
		var done []struct {
			ID     int64 `bun:"id"`
			UserID int64 `bun:"user_id"`
		}
		err = tx.NewUpdate().Table("tb_voucher_order").
			Set("status = ?", domain.OrderCancelled).Set("cancel_time = ?", now).
			Set("update_time = ?", now).Set("cancel_reason = ?", reason).
			Where("id IN (?) AND voucher_id = ? AND status = ?", bun.In(ids), voucherID, domain.OrderUnpaid).
			Returning("id, user_id").Scan(ctx, &done)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("cancel orders: %w", err)
		}
		if len(done) == 0 {
			return nil
		}
		if _, err := tx.NewUpdate().Table("tb_seckill_voucher").Set("stock = stock + ?", len(done)).
			Where("voucher_id = ?", voucherID).Exec(ctx); err != nil {
			return fmt.Errorf("return %d units: %w", len(done), err)
		}
		perUser := map[int64]int{}
		ledger := make([]ledgerRow, 0, len(done))
		for _, d := range done {
			perUser[d.UserID]++
			ref, user := d.ID, d.UserID
			ledger = append(ledger, ledgerRow{VoucherID: voucherID, Delta: 1, Reason: reason, RefID: &ref, CreateTime: now})
			pending = append(pending, pendingRow{Kind: pendingReturn, RefID: ref, VoucherID: voucherID, UserID: &user,
				Delta: 1, LoadStamp: locked[voucherID].stamp, CreateTime: now})
		}
		users := make([]int64, 0, len(perUser))
		for u := range perUser {
			users = append(users, u)
		}
		slices.Sort(users) // the same lock order as the order writer's
		for _, u := range users {
			if _, err := tx.NewUpdate().Table("tb_voucher_user").Set("live = live - ?", perUser[u]).
				Where("voucher_id = ? AND user_id = ?", voucherID, u).Exec(ctx); err != nil {
				return fmt.Errorf("free user %d's slot: %w", u, err)
			}
		}
		if _, err := tx.NewInsert().Model(&ledger).Exec(ctx); err != nil {
			return fmt.Errorf("insert ledger rows: %w", err)
		}
		if _, err := tx.NewInsert().Model(&pending).Exec(ctx); err != nil {
			return fmt.Errorf("record returns pending for redis: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cancel %d orders of voucher %d: %w", len(ids), voucherID, err)
	}
	return pending, nil
}

// apply applies pending changes of one voucher to Redis and then forgets
// them. A crash between the two leaves rows the script skips next time.
func (s *Orders) apply(ctx context.Context, voucherID int64, rows []pendingRow) error {
	if _, err := applyPending(ctx, s.rdb, voucherID, rows); err != nil {
		return err
	}
	for _, kind := range []string{pendingReturn, pendingRestock} {
		var refs []int64
		for _, p := range rows {
			if p.Kind == kind {
				refs = append(refs, p.RefID)
			}
		}
		if len(refs) == 0 {
			continue
		}
		if _, err := s.db.NewDelete().Model((*pendingRow)(nil)).Where("kind = ? AND ref_id IN (?)", kind, bun.In(refs)).Exec(ctx); err != nil {
			return fmt.Errorf("forget %d applied stock changes: %w", len(refs), err)
		}
	}
	return nil
}

// ApplyPending applies to Redis up to limit pending stock changes
// committed before before (left by a node that crashed or lost Redis
// between its commit and its apply), and returns how many it handled.
func (s *Orders) ApplyPending(ctx context.Context, before time.Time, limit int) (int, error) {
	var rows []pendingRow
	if err := s.db.NewSelect().Model(&rows).Where("create_time < ?", before.UTC()).
		OrderExpr("create_time").Limit(int64(limit)).Scan(ctx); err != nil {
		return 0, fmt.Errorf("read pending stock changes: %w", err)
	}
	perVoucher := map[int64][]pendingRow{}
	for _, p := range rows {
		perVoucher[p.VoucherID] = append(perVoucher[p.VoucherID], p)
	}
	n := 0
	for v, ps := range perVoucher {
		if err := s.apply(ctx, v, ps); err != nil {
			return n, err
		}
		n += len(ps)
	}
	return n, nil
}

// AddStock adds units to a seckill voucher once per (voucher, key): stock
// and initial stock in the database with a ledger row, then Redis. A
// retry with the same key finds its restock and only finishes applying it
// to Redis if that was left undone. An ended voucher takes no restock.
func (s *Orders) AddStock(ctx context.Context, r domain.Restock, now time.Time) error {
	now = now.UTC()
	var pending []pendingRow
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		pending = nil
		locked, err := lockSeckillRows(ctx, tx, []int64{r.VoucherID})
		if err != nil {
			return err
		}
		var v struct {
			Status  domain.VoucherStatus `bun:"status"`
			Initial int                  `bun:"initial_stock"`
		}
		err = tx.NewSelect().TableExpr("tb_voucher AS v").Join("JOIN tb_seckill_voucher AS s ON s.voucher_id = v.id").
			ColumnExpr("v.status, s.initial_stock").Where("v.id = ?", r.VoucherID).Scan(ctx, &v)
		if errors.Is(err, sql.ErrNoRows) {
			return domain.NotFound("seckill voucher", r.VoucherID)
		}
		if err != nil {
			return fmt.Errorf("read voucher: %w", err)
		}
		var prev restockRow
		err = tx.NewSelect().Model(&prev).Where("voucher_id = ? AND request_key = ?", r.VoucherID, r.Key).Scan(ctx)
		if err == nil { // a retry: finish what may be left for Redis
			return tx.NewSelect().Model(&pending).Where("kind = ? AND ref_id = ?", pendingRestock, prev.ID).Scan(ctx)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("look up restock: %w", err)
		}
		if v.Status == domain.StatusEnded {
			return domain.RestockOfEndedVoucher(r.VoucherID)
		}
		if int64(v.Initial)+int64(r.Amount) > math.MaxInt32 {
			return domain.RestockPastMaxStock(math.MaxInt32)
		}
		row := restockRow{ID: randomID(), VoucherID: r.VoucherID, RequestKey: r.Key, Amount: r.Amount, CreateTime: now}
		if _, err := tx.NewInsert().Model(&row).Exec(ctx); err != nil {
			return fmt.Errorf("record restock: %w", err)
		}
		if _, err := tx.NewUpdate().Table("tb_seckill_voucher").
			Set("stock = stock + ?", r.Amount).Set("initial_stock = initial_stock + ?", r.Amount).
			Where("voucher_id = ?", r.VoucherID).Exec(ctx); err != nil {
			return fmt.Errorf("add stock: %w", err)
		}
		ref := row.ID
		if _, err := tx.NewInsert().Model(&ledgerRow{VoucherID: r.VoucherID, Delta: r.Amount, Reason: ReasonRestock, RefID: &ref, CreateTime: now}).Exec(ctx); err != nil {
			return fmt.Errorf("insert ledger row: %w", err)
		}
		pending = []pendingRow{{Kind: pendingRestock, RefID: ref, VoucherID: r.VoucherID, Delta: r.Amount,
			Initial: v.Initial + r.Amount, LoadStamp: locked[r.VoucherID].stamp, CreateTime: now}}
		_, err = tx.NewInsert().Model(&pending).Exec(ctx)
		return err
	})
	if domain.ErrorCode(err) == domain.CodeBadInput || domain.ErrorCode(err) == domain.CodeNotFound {
		return err
	}
	if err != nil {
		return fmt.Errorf("add %d units to voucher %d: %w", r.Amount, r.VoucherID, err)
	}
	if err := s.apply(ctx, r.VoucherID, pending); err != nil {
		s.log.WarnContext(ctx, "restock not yet in redis; the sweeper retries", "voucher", r.VoucherID, "err", err)
	}
	return nil
}

// randomID is a positive random 63-bit id (restocks have no allocator).
func randomID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return cmp.Or(int64(binary.BigEndian.Uint64(b[:])>>1), 1)
}
