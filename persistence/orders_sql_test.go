package persistence_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// The order writer stores a batch on Postgres as one array per column
// (unnest) and, on SQLite or for rows the array form does not take, as a
// multi-row VALUES. Both forms must store the same rows, skip the same
// replays, count the same live orders and trip the same guards. Each form
// writes the same orders under its own vouchers and ids; the stored rows
// are compared field by field.
func TestOrderInsertsAgreeAcrossForms(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testenv.MustPostgres(t)
	base := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	// Request ids that text arrays must quote: quotes, backslashes,
	// commas, braces, the word NULL, spaces.
	requests := []string{"plain-1", `quo"te\back,comma{brace}`, "NULL", "it's", " spaced ", "~!@#$%^&*()_+`", "{}"}
	batch := func(form int64) []persistence.LogOrder {
		shared, slotted := 10*form+1, 10*form+2 // limit 2, no slot; one order each, slot 1
		var out []persistence.LogOrder
		for i := range 12 {
			o := persistence.LogOrder{
				ID: 1000*form + int64(i), UserID: 100 + int64(i%5), VoucherID: shared,
				Created: base.Add(time.Duration(i)*time.Millisecond + 250*time.Microsecond),
			}
			if i < len(requests) {
				o.RequestID = requests[i]
			}
			if i >= 10 {
				o.VoucherID, o.Slot, o.UserID = slotted, 1, 200+int64(i)
			}
			out = append(out, o)
		}
		return out
	}
	write := func(form int64, orders []persistence.LogOrder) ([]int64, error) {
		ins, err := persistence.WriteLogOrders(ctx, db, form == 2, orders, 2)
		for i := range ins {
			ins[i] -= 1000 * form
		}
		slices.Sort(ins)
		return ins, err
	}
	for _, form := range []int64{1, 2} { // 1: VALUES, 2: arrays
		orders := batch(form)
		ins, err := write(form, orders)
		if err != nil {
			t.Fatalf("form %d: %v", form, err)
		}
		if len(ins) != len(orders) {
			t.Fatalf("form %d inserted %v of %d orders", form, ins, len(orders))
		}
		// A replay of three stored orders beside one new one: only the
		// new one is inserted.
		again := append(orders[:3:3], persistence.LogOrder{ID: 1000*form + 50, UserID: 300, VoucherID: 10*form + 1, Created: base})
		if ins, err = write(form, again); err != nil || !slices.Equal(ins, []int64{50}) {
			t.Fatalf("form %d replay: inserted %v, %v; want only order 50", form, ins, err)
		}
		// A second order of that user, in a batch of its own: added to
		// the user's counter.
		more := []persistence.LogOrder{{ID: 1000*form + 51, UserID: 300, VoucherID: 10*form + 1, RequestID: "late", Created: base.Add(time.Hour)}}
		if ins, err = write(form, more); err != nil || !slices.Equal(ins, []int64{51}) {
			t.Fatalf("form %d second order: inserted %v, %v; want order 51", form, ins, err)
		}
		// Past a user's limit (user 100 holds 2 live orders of the shared
		// voucher) and a second live slot: each refused whole, nothing
		// written.
		over := []persistence.LogOrder{{ID: 1000*form + 60, UserID: 100, VoucherID: 10*form + 1, Created: base}}
		slot := []persistence.LogOrder{{ID: 1000*form + 61, UserID: 210, VoucherID: 10*form + 2, Slot: 1, Created: base}}
		for name, bad := range map[string][]persistence.LogOrder{"over the limit": over, "second live slot": slot} {
			if ins, err := write(form, bad); err == nil {
				t.Errorf("form %d, %s: inserted %v, want a refusal", form, name, ins)
			}
		}
	}
	values, arrays := storedSale(t, db, 1), storedSale(t, db, 2)
	if len(values) == 0 || !slices.Equal(values, arrays) {
		t.Fatalf("the forms stored different rows:\nVALUES: %q\narrays: %q", values, arrays)
	}
}

// storedSale lists, as text, the rows a form's orders left in the three
// tables, with the form's id and voucher offsets taken away.
func storedSale(tb testing.TB, db *bun.DB, form int64) []string {
	tb.Helper()
	ctx := tb.Context()
	var out []string
	queries := []string{
		`SELECT id - ?0 * 1000, user_id, voucher_id - ?0 * 10, status, slot, create_time, pay_time, request_id, cancel_time, update_time, cancel_reason
		   FROM tb_voucher_order WHERE voucher_id IN (?0 * 10 + 1, ?0 * 10 + 2) ORDER BY id`,
		`SELECT voucher_id - ?0 * 10, delta, reason, ref_id - ?0 * 1000, create_time
		   FROM tb_stock_ledger WHERE voucher_id IN (?0 * 10 + 1, ?0 * 10 + 2) ORDER BY ref_id`,
		`SELECT voucher_id - ?0 * 10, user_id, live, per_user_limit
		   FROM tb_voucher_user WHERE voucher_id IN (?0 * 10 + 1, ?0 * 10 + 2) ORDER BY voucher_id, user_id`,
	}
	for _, q := range queries {
		rows, err := db.QueryContext(ctx, q, form)
		if err != nil {
			tb.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				tb.Fatal(err)
			}
			out = append(out, fmt.Sprint(vals...))
		}
		if err := rows.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}
