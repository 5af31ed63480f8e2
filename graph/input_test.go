package graph_test

import (
	"strings"
	"testing"
)

func TestCreateVoucherRejectsUnstorableInput(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	with := func(k string, v any) map[string]any {
		in := seckillInput(1, 10)
		in[k] = v
		return in
	}
	const maxInt64 = 9223372036854775807
	cases := []struct {
		name  string
		in    map[string]any
		field string
	}{
		{"NUL in title", with("title", "fl\x00sh"), "title"},
		{"NUL in subTitle", with("subTitle", "a\x00b"), "subTitle"},
		{"NUL in rules", with("rules", "line 1\n\x00"), "rules"},
		{"escape in title", with("title", "\x1b[31mred"), "title"},
		{"newline in title", with("title", "two\nlines"), "title"},
		{"DEL in rules", with("rules", "a\x7fb"), "rules"},
		{"C1 control in subTitle", with("subTitle", "a\u0085b"), "subTitle"},
		{"rules too long", with("rules", strings.Repeat("r", 4001)), "rules"},
		{"payValue over Int", with("payValue", int64(maxInt64)), "payValue"},
		{"payValue just over Int", with("payValue", int64(1)<<31), "payValue"},
		{"actualValue over Int", with("actualValue", int64(maxInt64)), "actualValue"},
		{"perUserLimit over Int", with("perUserLimit", int64(maxInt64)), "perUserLimit"},
		{"perUserLimit over its bound", with("perUserLimit", 1001), "perUserLimit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := wantCode(t, s.do(t, s.admin(t), createSeckill, map[string]any{"in": tc.in}, nil), "BAD_USER_INPUT")
			if !strings.Contains(e.Message, tc.field) {
				t.Fatalf("message %q does not name field %s", e.Message, tc.field)
			}
		})
	}

	t.Run("tabs and newlines in rules are fine, and the largest Int", func(t *testing.T) {
		in := seckillInput(1, 10)
		in["rules"] = "1.\tone per person\n2.\tno refunds"
		in["payValue"] = 1<<31 - 1
		in["actualValue"] = 1<<31 - 1
		in["perUserLimit"] = 20 // above the stock: a restock can make it count
		s.createVoucher(t, in)
	})

	t.Run("nothing else was written", func(t *testing.T) {
		var n int
		if err := s.db.NewSelect().Table("tb_voucher").ColumnExpr("count(*)").Scan(t.Context(), &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("tb_voucher has %d rows, want 1", n)
		}
	})
}
