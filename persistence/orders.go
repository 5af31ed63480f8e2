package persistence

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"flashsale/domain"
)

// The SQL of the order log handler's transaction (OrderLogHandler.
// insertOrders): the orders, the stock they take, their users' live-order
// counters and their ledger rows.

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
	if err := upsertLiveOrders(ctx, tx, rows); err != nil {
		return fmt.Errorf("count live orders of %d users: %w", len(rows), err)
	}
	return nil
}

// The writer's three inserts on Postgres take their rows as one array per
// column (INSERT ... SELECT FROM unnest) rather than bun's multi-row
// VALUES: the statement's text no longer grows with the batch, so bun
// formats a handful of arrays instead of every row's struct by
// reflection, and Postgres parses and plans a fixed statement (docs/
// DECISIONS.md, "The order writer's inserts as arrays"). SQLite has no
// unnest and keeps the VALUES form; TestOrderInsertsAgreeAcrossForms holds
// the two forms to the same rows.

// insertOrderRows inserts new orders, skipping ids already stored, and
// returns the ids it inserted.
func insertOrderRows(ctx context.Context, tx bun.Tx, rows []orderRow) ([]int64, error) {
	if IsPostgres(tx) && allFresh(rows) {
		return insertOrderArrays(ctx, tx, rows)
	}
	return insertOrderValues(ctx, tx, rows)
}

// insertOrderValues is insertOrderRows's VALUES form.
func insertOrderValues(ctx context.Context, tx bun.Tx, rows []orderRow) ([]int64, error) {
	var inserted []int64
	err := tx.NewInsert().Model(&rows).On("CONFLICT (id) DO NOTHING").Returning("id").Scan(ctx, &inserted)
	return inserted, err
}

// insertOrderArrays is insertOrderRows's array form, for rows allFresh
// accepts.
func insertOrderArrays(ctx context.Context, tx bun.Tx, rows []orderRow) ([]int64, error) {
	n := len(rows)
	ids, users, vouchers := make([]int64, n), make([]int64, n), make([]int64, n)
	statuses, slots := make([]int, n), make([]int, n)
	created, updated := make([]time.Time, n), make([]time.Time, n)
	requests := make([]string, n)
	for i, r := range rows {
		ids[i], users[i], vouchers[i] = r.ID, r.UserID, r.VoucherID
		statuses[i], created[i], updated[i] = int(r.Status), r.CreateTime, r.UpdateTime
		if r.Slot != nil {
			slots[i] = *r.Slot // 1 (allFresh); 0 stands for NULL
		}
		requests[i] = deref(r.RequestID) // never empty (allFresh)
	}
	var inserted []int64
	err := tx.NewRaw(`INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, slot, create_time, request_id, update_time)
SELECT id, user_id, voucher_id, status, NULLIF(slot, 0), create_time, NULLIF(request_id, ''), update_time
FROM unnest(?::bigint[], ?::bigint[], ?::bigint[], ?::smallint[], ?::int[], ?::timestamptz[], ?::text[], ?::timestamptz[])
    AS t (id, user_id, voucher_id, status, slot, create_time, request_id, update_time)
ON CONFLICT (id) DO NOTHING RETURNING id`,
		pgdialect.Array(ids), pgdialect.Array(users), pgdialect.Array(vouchers), pgdialect.Array(statuses),
		pgdialect.Array(slots), pgdialect.Array(created), pgdialect.Array(requests), pgdialect.Array(updated),
	).Scan(ctx, &inserted)
	return inserted, err
}

// allFresh tells whether rows are all new orders as the order log holds
// them, which is what the array form writes: never paid or cancelled, a
// slot of 1 or none, a valid request id or none (an empty one would
// become NULL there; bun's array text drops NUL bytes, which no valid id
// holds). Anything else takes the VALUES form.
func allFresh(rows []orderRow) bool {
	for _, r := range rows {
		if r.PayTime != nil || r.CancelTime != nil || r.CancelReason != nil ||
			(r.Slot != nil && *r.Slot != 1) || (r.RequestID != nil && domain.CheckRequestID(*r.RequestID) != nil) {
			return false
		}
	}
	return true
}

// insertLedgerRows inserts ledger rows; a row already recorded (the same
// voucher, reason and reference) is skipped.
func insertLedgerRows(ctx context.Context, tx bun.Tx, rows []ledgerRow) error {
	if IsPostgres(tx) && !slices.ContainsFunc(rows, func(r ledgerRow) bool { return r.RefID == nil }) {
		return insertLedgerArrays(ctx, tx, rows)
	}
	return insertLedgerValues(ctx, tx, rows)
}

// insertLedgerValues is insertLedgerRows's VALUES form.
func insertLedgerValues(ctx context.Context, tx bun.Tx, rows []ledgerRow) error {
	_, err := tx.NewInsert().Model(&rows).On("CONFLICT DO NOTHING").Exec(ctx)
	return err
}

// insertLedgerArrays is insertLedgerRows's array form, for rows that all
// have a reference.
func insertLedgerArrays(ctx context.Context, tx bun.Tx, rows []ledgerRow) error {
	n := len(rows)
	vouchers, deltas, refs := make([]int64, n), make([]int, n), make([]int64, n)
	reasons, created := make([]string, n), make([]time.Time, n)
	for i, r := range rows {
		vouchers[i], deltas[i], refs[i] = r.VoucherID, r.Delta, *r.RefID
		reasons[i], created[i] = r.Reason, r.CreateTime
	}
	_, err := tx.NewRaw(`INSERT INTO tb_stock_ledger (voucher_id, delta, reason, ref_id, create_time)
SELECT * FROM unnest(?::bigint[], ?::int[], ?::text[], ?::bigint[], ?::timestamptz[])
ON CONFLICT DO NOTHING`,
		pgdialect.Array(vouchers), pgdialect.Array(deltas), pgdialect.Array(reasons), pgdialect.Array(refs), pgdialect.Array(created),
	).Exec(ctx)
	return err
}

// upsertLiveOrders adds rows' live orders to their users' counters, in
// the order of rows (WITH ORDINALITY keeps it, for the lock order).
func upsertLiveOrders(ctx context.Context, tx bun.Tx, rows []voucherUserRow) error {
	if IsPostgres(tx) {
		return upsertLiveOrderArrays(ctx, tx, rows)
	}
	return upsertLiveOrderValues(ctx, tx, rows)
}

// upsertLiveOrderValues is upsertLiveOrders's VALUES form.
func upsertLiveOrderValues(ctx context.Context, tx bun.Tx, rows []voucherUserRow) error {
	_, err := tx.NewInsert().Model(&rows).
		On("CONFLICT (voucher_id, user_id) DO UPDATE").Set("live = ?TableAlias.live + EXCLUDED.live").
		Exec(ctx)
	return err
}

// upsertLiveOrderArrays is upsertLiveOrders's array form.
func upsertLiveOrderArrays(ctx context.Context, tx bun.Tx, rows []voucherUserRow) error {
	n := len(rows)
	vouchers, users, live, limits := make([]int64, n), make([]int64, n), make([]int, n), make([]int, n)
	for i, r := range rows {
		vouchers[i], users[i], live[i], limits[i] = r.VoucherID, r.UserID, r.Live, r.PerUserLimit
	}
	_, err := tx.NewRaw(`INSERT INTO tb_voucher_user AS u (voucher_id, user_id, live, per_user_limit)
SELECT voucher_id, user_id, live, per_user_limit
FROM unnest(?::bigint[], ?::bigint[], ?::int[], ?::int[]) WITH ORDINALITY AS t (voucher_id, user_id, live, per_user_limit, n)
ORDER BY n
ON CONFLICT (voucher_id, user_id) DO UPDATE SET live = u.live + EXCLUDED.live`,
		pgdialect.Array(vouchers), pgdialect.Array(users), pgdialect.Array(live), pgdialect.Array(limits),
	).Exec(ctx)
	return err
}
