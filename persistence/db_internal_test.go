package persistence

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Constraint violations are recognised by their driver's error code and
// named by their constraint, in both dialects: SQLite's from a real
// database (its errors cannot be built by hand), Postgres's as pgx
// reports them (the Postgres suites provoke each one for real).
func TestConstraintViolationsAreRecognisedByCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "guards.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	const now = "'2026-01-01 00:00:00+00:00'"
	setup := []string{
		"INSERT INTO tb_voucher (id, shop_id, title, pay_value, actual_value, type, status, create_time, update_time) VALUES (1, 1, 'v', 1, 2, 1, 1, " + now + ", " + now + ")",
		"INSERT INTO tb_seckill_voucher (voucher_id, initial_stock, stock, per_user_limit, begin_time, end_time) VALUES (1, 5, 5, 1, " + now + ", '2027-01-01 00:00:00+00:00')",
		"INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, slot, request_id, create_time, update_time) VALUES (10, 7, 1, 1, 1, 'r1', " + now + ", " + now + ")",
		"INSERT INTO tb_voucher_user (voucher_id, user_id, live, per_user_limit) VALUES (1, 7, 1, 1)",
	}
	for _, q := range setup {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	order := func(id, user, voucher int64, slot, req string) string {
		return fmt.Sprintf("INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, slot, request_id, create_time, update_time) VALUES (%d, %d, %d, 1, %s, %s, %s, %s)",
			id, user, voucher, slot, req, now, now)
	}
	cases := []struct {
		name, sql, reason string
		unique            bool
	}{
		{"a second order under an id", order(10, 8, 1, "NULL", "NULL"), DeadIDCollision, true},
		{"a second live slot of a user", order(11, 7, 1, "1", "NULL"), DeadOverUserLimit, true},
		{"a second order of a request id", order(12, 9, 1, "NULL", "'r1'"), DeadDuplicateRequest, true},
		{"an order of an unknown voucher", order(13, 9, 99, "NULL", "NULL"), DeadUnknownVoucher, false},
		{"stock below zero", "UPDATE tb_seckill_voucher SET stock = stock - 6 WHERE voucher_id = 1", DeadOverStock, false},
		{"live orders past the user's limit", "UPDATE tb_voucher_user SET live = live + 1 WHERE voucher_id = 1", DeadOverUserLimit, false},
	}
	for _, tc := range cases {
		t.Run("sqlite: "+tc.name, func(t *testing.T) {
			_, err := db.ExecContext(ctx, tc.sql)
			if !isConstraintViolation(err) || isUniqueViolation(err) != tc.unique {
				t.Fatalf("%v: constraint %v, unique %v (want %v)", err, isConstraintViolation(err), isUniqueViolation(err), tc.unique)
			}
			if got := refusalReason(fmt.Errorf("insert: %w", err)); got != tc.reason {
				t.Fatalf("%v: reason %s, want %s", err, got, tc.reason)
			}
		})
	}

	pg := []struct {
		name   string
		err    *pgconn.PgError
		reason string
	}{
		{"the order's primary key", &pgconn.PgError{Code: "23505", ConstraintName: "tb_voucher_order_pkey"}, DeadIDCollision},
		{"the live-slot index", &pgconn.PgError{Code: "23505", ConstraintName: "ux_voucher_order_live_slot"}, DeadOverUserLimit},
		{"the request index", &pgconn.PgError{Code: "23505", ConstraintName: "ux_voucher_order_request"}, DeadDuplicateRequest},
		{"the user's live-order check", &pgconn.PgError{Code: "23514", ConstraintName: "tb_voucher_user_check"}, DeadOverUserLimit},
		{"the stock check", &pgconn.PgError{Code: "23514", ConstraintName: "tb_seckill_voucher_stock_check"}, DeadOverStock},
		{"a foreign key", &pgconn.PgError{Code: "23503", ConstraintName: "tb_voucher_order_voucher_id_fkey"}, DeadUnknownVoucher},
	}
	for _, tc := range pg {
		t.Run("postgres: "+tc.name, func(t *testing.T) {
			err := fmt.Errorf("insert: %w", tc.err)
			if !isConstraintViolation(err) || isUniqueViolation(err) != (tc.err.Code == "23505") {
				t.Fatalf("%v not recognised", err)
			}
			if got := refusalReason(err); got != tc.reason {
				t.Fatalf("reason %s, want %s", got, tc.reason)
			}
		})
	}
	if isConstraintViolation(&pgconn.PgError{Code: "40001"}) || isConstraintViolation(fmt.Errorf("UNIQUE constraint failed: in a message")) {
		t.Fatal("a serialization failure or a bare message taken for a constraint violation")
	}
}
