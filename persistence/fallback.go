package persistence

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
)

// The database fallback (DEGRADE_TO_DB): while the stock
// Redis is down, grabs are sold straight from Postgres, one transaction
// per grab, at bounded concurrency.
//
// The rule that keeps it from selling what Redis sold (see docs/DECISIONS.md,
// "Redis stalls, the breaker and the database fallback"): a grab is sold
// only while tb_seckill_voucher.stock equals the stock the caller expects,
// the Redis remaining stock this node last saw less what it sold from the
// database since. Redis's remaining stock already excludes the orders of
// its order log, the database's does not until they are persisted: so the
// two are equal only when no order Redis sold is still on its way, and
// the database path can then never sell a unit, or a user's slot, that an
// order of the log holds. While orders are in flight the grab answers
// UNAVAILABLE.
//
// That view is only this node's. Another node may have sold from Redis
// after this one last read it, and its orders may still be in the order
// log (unreadable while Redis is down): equal stocks would then hide them,
// and the database would sell their units again — Postgres refuses those
// orders later, but they were answered OK, and an OK is a promise. So a
// grab is sold only while every other node's order ids stopped
// fallbackSlack before this node read Redis: a node sells only with ids of
// seconds its slot reserved (tb_order_id_node.reserved_until_sec, see
// OrderIDs), and answers OK within a grab deadline of taking them, so all
// of its OK'd sales came before the read and are in the view. In practice
// the fallback sells while this node is the only one selling; a node that
// shares the voucher with live nodes answers UNAVAILABLE, as without the
// fallback.
//
// This node's own script calls are the third source: a call that Redis
// stalled on may still run when Redis resumes (an undecided call), and one
// still in flight may run at any moment. The caller (the actors' node
// ledger) keeps their users and request ids off the database and passes
// the units they may take as view.Reserved: the database sells only what
// is left beyond them, so whatever those calls do when Redis runs them,
// the two stores together never sell more than the stock, a user's slot
// twice or one request id twice. The view's remaining stock is the node's
// last confirmed read of Redis, never an activation's guess after a call
// that failed.

// DBSalesStamp is the load stamp recorded for a voucher once the database
// sold it directly: the Redis load, which does not know those sales, is
// stale. Every preheat that finds it re-syncs Redis from the database
// (Stock.Preheat with LoadSnapshot.Stale), and the order writer, which
// compares the stamps of the orders it persists with the recorded one,
// removes the stale load from Redis as it does for any unrecorded load.
const DBSalesStamp = "db-sales"

// FallbackConcurrencyDefault bounds the database grabs running at once:
// each holds a connection and its voucher's row lock.
const FallbackConcurrencyDefault = 8

// fallbackSlack covers, in the rule above, a grab call's deadline (the
// time from taking ids to answering OK, 400 ms) and the clock difference
// between nodes (NTP keeps it well under a second).
const fallbackSlack = 3 * time.Second

// RedisOutage says whether Redis is taken to be down: the request
// path's circuit breaker (breaker.Breaker) is open or half-open.
type RedisOutage interface {
	Down() bool
}

// DBGrabs sells seckill vouchers from Postgres while the breaker says
// Redis is down.
type DBGrabs struct {
	db      *bun.DB
	breaker RedisOutage
	sem     chan struct{}
	now     func() time.Time
	// mu is held shared by every database grab; Barrier takes it alone,
	// so that the re-sync after an outage starts only once no database
	// sale is running, and none starts after (the breaker is no longer
	// down then).
	mu sync.RWMutex
}

// NewDBGrabs returns the database fallback; concurrency <= 0 takes
// FallbackConcurrencyDefault.
func NewDBGrabs(db *bun.DB, breaker RedisOutage, concurrency int) *DBGrabs {
	concurrency = cmp.Or(concurrency, FallbackConcurrencyDefault)
	return &DBGrabs{db: db, breaker: breaker, sem: make(chan struct{}, concurrency), now: time.Now}
}

// Barrier waits for the database grabs under way. Call it after the breaker
// left the down state and before reading which vouchers need a re-sync.
func (d *DBGrabs) Barrier() {
	d.mu.Lock()
	d.mu.Unlock() //nolint:staticcheck // an empty critical section is the point: wait for the readers
}

// Grab sells one unit of the voucher to g.UserID under g.OrderID, in one
// transaction: the voucher's row lock, the request id (a retry gets its
// first order), status and time window, the user's live orders
// (tb_voucher_user), then the conditional decrement, the order, the user's
// counter and the ledger row, and the stale-load mark. view is the
// caller's view of Redis: the stock it says is left and when it was read
// (see the rule above); g.OrderID names this node's order-id slot.
// sold reports a new sale (not a replayed request). Over the concurrency
// bound, or while Redis is not down, it answers UNAVAILABLE.
func (d *DBGrabs) Grab(ctx context.Context, voucherID int64, view domain.RedisView, g domain.Grab) (res domain.GrabResult, sold bool, err error) {
	select {
	case d.sem <- struct{}{}:
		defer func() { <-d.sem }()
	default:
		return d.count(domain.GrabResult{Code: domain.SeckillUnavailable}), false, nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.breaker.Down() {
		return d.count(domain.GrabResult{Code: domain.SeckillUnavailable}), false, nil
	}
	err = d.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, sold, err = d.grab(ctx, tx, voucherID, view, g)
		return err
	})
	if err != nil {
		return domain.GrabResult{}, false, fmt.Errorf("database grab of voucher %d: %w", voucherID, err)
	}
	return d.count(res), sold, nil
}

func (d *DBGrabs) count(res domain.GrabResult) domain.GrabResult {
	fallbackGrabs.WithLabelValues(string(res.Code)).Inc()
	return res
}

func (d *DBGrabs) grab(ctx context.Context, tx bun.Tx, voucherID int64, view domain.RedisView, g domain.Grab) (domain.GrabResult, bool, error) {
	locked, err := lockSeckillRows(ctx, tx, []int64{voucherID})
	if err != nil {
		return domain.GrabResult{}, false, err
	}
	if _, ok := locked[voucherID]; !ok {
		return domain.GrabResult{Code: domain.SeckillNotFound}, false, nil
	}
	var prev int64
	err = tx.NewSelect().Table("tb_voucher_order").Column("id").
		Where("voucher_id = ? AND request_id = ?", voucherID, g.RequestID).Scan(ctx, &prev)
	switch {
	case err == nil:
		return domain.GrabResult{Code: domain.SeckillOK, OrderID: prev}, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return domain.GrabResult{}, false, fmt.Errorf("look up request: %w", err)
	}
	v, err := getVoucher(ctx, tx, voucherID)
	if err != nil {
		return domain.GrabResult{}, false, err
	}
	sk, now := v.Seckill, d.now()
	switch {
	case v.Status == domain.StatusPaused:
		return domain.GrabResult{Code: domain.SeckillPaused}, false, nil
	case v.Status == domain.StatusEnded, !now.Before(sk.EndAt):
		return domain.GrabResult{Code: domain.SeckillEnded}, false, nil
	case now.Before(sk.BeginAt):
		return domain.GrabResult{Code: domain.SeckillNotStarted}, false, nil
	}
	var live int
	err = tx.NewSelect().Table("tb_voucher_user").Column("live").
		Where("voucher_id = ? AND user_id = ?", voucherID, g.UserID).Scan(ctx, &live)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return domain.GrabResult{}, false, fmt.Errorf("read the user's live orders: %w", err)
	}
	if live >= sk.PerUserLimit {
		return domain.GrabResult{Code: domain.SeckillLimitReached}, false, nil
	}
	if sk.Stock <= 0 {
		return domain.GrabResult{Code: domain.SeckillSoldOut}, false, nil
	}
	if sk.Stock != view.Remaining {
		// Orders Redis sold are still on their way to the database (or
		// this node's view of Redis is out of date): what is free is not
		// known here.
		return domain.GrabResult{Code: domain.SeckillUnavailable}, false, nil
	}
	if sk.Stock <= view.Reserved {
		// What is left may all be taken by this node's calls that Redis
		// holds undecided: they run when it resumes.
		return domain.GrabResult{Code: domain.SeckillUnavailable}, false, nil
	}
	if quiet, err := othersStoppedBefore(ctx, tx, orderIDNodeOf(g.OrderID), view.SeenAt); err != nil {
		return domain.GrabResult{}, false, err
	} else if !quiet {
		// Another node may have sold from Redis since this node read it.
		return domain.GrabResult{Code: domain.SeckillUnavailable}, false, nil
	}
	upd, err := tx.NewUpdate().Table("tb_seckill_voucher").Set("stock = stock - 1").
		Where("voucher_id = ? AND stock > 0", voucherID).Exec(ctx)
	if err != nil {
		return domain.GrabResult{}, false, fmt.Errorf("take a unit: %w", err)
	}
	if n, _ := upd.RowsAffected(); n != 1 {
		return domain.GrabResult{Code: domain.SeckillSoldOut}, false, nil
	}
	created := now.UTC().Truncate(time.Microsecond)
	req := g.RequestID
	order := orderRow{ID: g.OrderID, UserID: g.UserID, VoucherID: voucherID, Status: domain.OrderUnpaid,
		CreateTime: created, UpdateTime: created, RequestID: &req}
	if sk.PerUserLimit == 1 {
		one := 1
		order.Slot = &one
	}
	if _, err := tx.NewInsert().Model(&order).Exec(ctx); err != nil {
		return domain.GrabResult{}, false, fmt.Errorf("insert order %d: %w", g.OrderID, err)
	}
	if err := addLiveOrders(ctx, tx, map[[2]int64]int{{voucherID, g.UserID}: 1}, locked); err != nil {
		return domain.GrabResult{}, false, err
	}
	ref := g.OrderID
	if _, err := tx.NewInsert().Model(&ledgerRow{VoucherID: voucherID, Delta: -1, Reason: ReasonSale, RefID: &ref, CreateTime: created}).Exec(ctx); err != nil {
		return domain.GrabResult{}, false, fmt.Errorf("insert ledger row: %w", err)
	}
	_, err = tx.NewInsert().Model(&redisLoadRow{VoucherID: voucherID, Stamp: DBSalesStamp, LoadTime: created}).
		On("CONFLICT (voucher_id) DO UPDATE").Set("life = EXCLUDED.life, load_time = EXCLUDED.load_time").Exec(ctx)
	if err != nil {
		return domain.GrabResult{}, false, fmt.Errorf("mark the redis load stale: %w", err)
	}
	return domain.GrabResult{Code: domain.SeckillOK, OrderID: g.OrderID}, true, nil
}

// othersStoppedBefore reports whether every order-id slot but own had its
// last reserved second end fallbackSlack before seen: then no other node
// answered OK to a Redis sale after seen (see the rule above).
func othersStoppedBefore(ctx context.Context, db bun.IDB, own int64, seen time.Time) (bool, error) {
	var last int64
	err := db.NewSelect().Model((*orderIDNode)(nil)).ColumnExpr("COALESCE(MAX(reserved_until_sec), 0)").
		Where("node <> ?", own).Scan(ctx, &last)
	if err != nil {
		return false, fmt.Errorf("read other nodes' order-id reservations: %w", err)
	}
	end := time.Unix(orderIDEpoch+last+1, 0)
	return end.Add(fallbackSlack).Before(seen), nil
}

// DBSoldVouchers lists the vouchers the database sold directly since
// Redis last loaded them: those whose Redis load must be re-synced before
// grabs use it again.
func (s *Vouchers) DBSoldVouchers(ctx context.Context) ([]int64, error) {
	var ids []int64
	if err := s.db.NewSelect().Model((*redisLoadRow)(nil)).Column("voucher_id").
		Where("life = ?", DBSalesStamp).Order("voucher_id").Scan(ctx, &ids); err != nil {
		return nil, fmt.Errorf("list vouchers sold from the database: %w", err)
	}
	return ids, nil
}
