package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
)

// reconcileSnapshotScript reads what Redis holds of a voucher at once: scripts/reconcile_snapshot.lua.
var reconcileSnapshotScript = newScript("reconcile_snapshot")

// Reconciliations reads the stock identity of vouchers (invariant 5) for
// the reconciler (orders.Reconciler), which judges and repairs.
type Reconciliations struct {
	db  *bun.DB
	rdb redis.UniversalClient
}

// NewReconciliations returns the reads over the database and the stock
// Redis.
func NewReconciliations(db *bun.DB, rdb redis.UniversalClient) *Reconciliations {
	return &Reconciliations{db: db, rdb: rdb}
}

// Reconcile reads one voucher's identity at one moment: it holds the
// voucher's row (no order writer commits meanwhile), reads Redis in one
// atomic step, and counts as in flight only the log's orders the database
// does not hold yet (a committed batch is acknowledged after its commit).
// Dead letters count when they were sold from the load Redis holds: a
// reload starts again from the database, and an order sold from a lost
// load never took a unit of the current one.
func (r *Reconciliations) Reconcile(ctx context.Context, voucherID int64) (domain.Reconciliation, error) {
	out := domain.Reconciliation{VoucherID: voucherID}
	err := r.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := lockSeckillRows(ctx, tx, []int64{voucherID}); err != nil {
			return err
		}
		err := tx.NewSelect().Table("tb_seckill_voucher").Column("initial_stock").
			Where("voucher_id = ?", voucherID).Scan(ctx, &out.Initial)
		if errors.Is(err, sql.ErrNoRows) {
			return domain.NotFound("seckill voucher", voucherID)
		}
		if err != nil {
			return fmt.Errorf("read seckill voucher %d: %w", voucherID, err)
		}
		live, err := liveOrderCounts(ctx, tx, voucherID)
		if err != nil {
			return err
		}
		// Changes committed here and maybe not applied in Redis yet: read
		// under the row lock (cancellations and restocks take it too).
		var pending []pendingRow
		if err := tx.NewSelect().Model(&pending).Where("voucher_id = ?", voucherID).Scan(ctx); err != nil {
			return fmt.Errorf("read pending stock changes of voucher %d: %w", voucherID, err)
		}
		members := make([]any, len(pending))
		for i, p := range pending {
			members[i] = pendingMember(p.Kind, p.RefID)
		}
		raw, err := reconcileSnapshotScript.Run(ctx, r.rdb, []string{metaKey(voucherID), stockKey(voucherID), usersKey(voucherID), LogKey(voucherID), appliedKey(voucherID)}, members...).Slice()
		if err != nil || len(raw) != 5 {
			return fmt.Errorf("read voucher %d from redis: %v %w", voucherID, raw, err)
		}
		stamp, _ := raw[0].(string)
		out.LoadStamp = stamp
		applied, _ := raw[4].([]any)
		stock, hasStock := raw[1].(string)
		out.Loaded = hasStock
		out.Remaining, _ = strconv.Atoi(stock)
		inflight, err := unpersisted(ctx, tx, pairs(raw[3]))
		if err != nil {
			return err
		}
		out.InFlight = len(inflight)
		want := map[string]int{} // each user's mark as the database and the log explain it
		if stamp != "" {
			var dead []struct {
				UserID int64 `bun:"user_id"`
				N      int   `bun:"n"`
			}
			err := tx.NewSelect().Model((*deadLetterRow)(nil)).ColumnExpr("user_id, COUNT(*) AS n").
				Where("voucher_id = ? AND load_stamp = ?", voucherID, stamp).Group("user_id").Scan(ctx, &dead)
			if err != nil {
				return fmt.Errorf("count dead letters of voucher %d: %w", voucherID, err)
			}
			for _, d := range dead {
				out.DeadLettered += d.N
				want[strconv.FormatInt(d.UserID, 10)] += d.N
			}
		}
		for u, n := range live {
			out.Live += n
			want[strconv.FormatInt(u, 10)] += n
		}
		for _, u := range inflight {
			want[u]++
		}
		for i, p := range pending {
			if done, _ := applied[i].(int64); done == 1 || stamp == "" || p.LoadStamp != stamp {
				continue // applied, or counted by the reload that replaced its load
			}
			out.Pending += p.Delta
			if p.UserID != nil {
				want[strconv.FormatInt(*p.UserID, 10)]++ // Redis still counts the slot
			}
		}
		marks := pairs(raw[2])
		for u, n := range marks {
			if c, _ := strconv.Atoi(n); c != want[u] && (c != 0 || want[u] != 0) {
				out.UsersOff++
			}
		}
		for u, n := range want {
			if _, ok := marks[u]; !ok && n != 0 {
				out.UsersOff++
			}
		}
		return nil
	})
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return domain.Reconciliation{}, err
	}
	if err != nil {
		return domain.Reconciliation{}, fmt.Errorf("reconcile voucher %d: %w", voucherID, err)
	}
	return out, nil
}

// pairs turns a flat {key, value, ...} reply into a map.
func pairs(v any) map[string]string {
	flat, _ := v.([]any)
	out := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		val, _ := flat[i+1].(string)
		out[k] = val
	}
	return out
}

// unpersisted returns, for the orders (id -> user) of an order log, the
// users of those the database does not hold.
func unpersisted(ctx context.Context, tx bun.Tx, orders map[string]string) ([]string, error) {
	ids := make([]int64, 0, len(orders))
	for o := range orders {
		if id, err := strconv.ParseInt(o, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	have, err := storedOrders(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	var users []string
	for o, u := range orders {
		if id, err := strconv.ParseInt(o, 10, 64); err != nil || !have[id] {
			users = append(users, u)
		}
	}
	return users, nil
}

// Vouchers lists the seckill vouchers whose sale ends after t: the ones
// reconciliation checks.
func (r *Reconciliations) Vouchers(ctx context.Context, t time.Time) ([]int64, error) {
	var ids []int64
	if err := r.db.NewSelect().Table("tb_seckill_voucher").Column("voucher_id").
		Where("end_time > ?", t.UTC()).Order("voucher_id").Scan(ctx, &ids); err != nil {
		return nil, fmt.Errorf("list seckill vouchers to reconcile: %w", err)
	}
	return ids, nil
}
