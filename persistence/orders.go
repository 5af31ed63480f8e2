package persistence

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/uptrace/bun"
)

// The SQL of the order writer's transaction: the orders, the stock they
// take, their users' live-order counters and their ledger rows.

// insertOrders writes rows in tx: one multi-row insert (a replayed id is
// skipped), the stock the inserted ones take, per voucher in id order (so
// concurrent writers lock rows in the same order), the live orders they
// add to their users' counters (whose CHECK refuses an order past the
// user's limit), and their ledger rows. A skipped id whose stored order
// differs is an id collision: its entries are marked bad rather than
// silently dropped.
func (w *OrderWriter) insertOrders(ctx context.Context, tx bun.Tx, rows []orderRow, byID map[int64][]*pendingOrder) error {
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
	w.persisted.Add(int64(len(inserted)))
	return nil
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

// checkReplays compares the orders a batch did not insert with the rows
// already stored under their ids: the same order (the whole entry) is a
// harmless replay, another order is an id collision, even for the same
// user and voucher.
func (w *OrderWriter) checkReplays(ctx context.Context, tx bun.Tx, rows []orderRow, inserted []int64, byID map[int64][]*pendingOrder) error {
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
