package graph_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/persistence"
)

func TestCreateVoucherRejectsBadInput(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	now := time.Now().UTC()
	with := func(k string, v any) map[string]any {
		in := seckillInput(1, 10)
		if v == nil {
			delete(in, k)
		} else {
			in[k] = v
		}
		return in
	}
	cases := []struct {
		name  string
		in    map[string]any
		field string
	}{
		{"zero stock", with("stock", 0), "stock"},
		{"negative stock", with("stock", -5), "stock"},
		{"stock above the maximum", with("stock", 100_000_001), "stock"},
		{"seckill without stock", with("stock", nil), "stock"},
		{"seckill without beginAt", with("beginAt", nil), "beginAt"},
		{"end before begin", with("endAt", now.Add(-time.Hour).Format(time.RFC3339)), "endAt"},
		{"end equals begin", with("endAt", seckillInput(1, 1)["beginAt"]), "endAt"},
		{"zero per-user limit", with("perUserLimit", 0), "perUserLimit"},
		{"empty title", with("title", "   "), "title"},
		{"negative pay value", with("payValue", -1), "payValue"},
		{"negative actual value", with("actualValue", -1), "actualValue"},
		{"zero shop id", with("shopId", "0"), ""},
		{"shop id not a number", with("shopId", "abc"), ""},
		{"normal voucher with stock", func() map[string]any {
			in := with("type", "NORMAL")
			delete(in, "beginAt")
			delete(in, "endAt")
			return in
		}(), "stock"},
		{"unknown type", with("type", "FREE"), ""},
		{"time not RFC3339", with("beginAt", "yesterday"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := s.do(t, s.admin(t), createSeckill, map[string]any{"in": tc.in}, nil)
			e := wantCode(t, errs, "BAD_USER_INPUT")
			if tc.field != "" && !strings.Contains(e.Message, tc.field) {
				t.Fatalf("message %q does not name field %s", e.Message, tc.field)
			}
		})
	}
	t.Run("nothing was written", func(t *testing.T) {
		for _, table := range []string{"tb_voucher", "tb_seckill_voucher", "tb_stock_ledger"} {
			var n int
			if err := s.db.NewSelect().Table(table).ColumnExpr("count(*)").Scan(t.Context(), &n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%s has %d rows", table, n)
			}
		}
		// The node's own leases (its writers', its maintenance jobs') and
		// its status (the console's) come and go; a refused voucher writes
		// nothing beside them.
		var written []string
		for _, k := range s.rdb.Keys(t.Context(), "*").Val() {
			if !strings.HasPrefix(k, "flashsale:lease:") && !strings.HasPrefix(k, "flashsale:consumer:") &&
				!strings.HasPrefix(k, "flashsale:redpacket-consumer:") && !strings.HasPrefix(k, persistence.NodeStatusPrefix) {
				written = append(written, k)
			}
		}
		if len(written) != 0 {
			t.Errorf("redis has keys %v", written)
		}
	})
}

func TestVouchersPaginate(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	var ids []string
	for i := 0; i < 7; i++ {
		ids = append(ids, s.createVoucher(t, seckillInput(1+i%2, 10+i)).ID)
	}
	user := s.token(t, 5, auth.RoleUser)
	const q = `query($first: Int, $after: String, $shop: ID) {
	  vouchers(first: $first, after: $after, shopId: $shop) {
	    edges { cursor node { id shopId seckill { remaining } } }
	    pageInfo { hasNextPage endCursor }
	  }
	}`
	type page struct {
		Vouchers struct {
			Edges []struct {
				Cursor string
				Node   struct {
					ID, ShopID string
					Seckill    struct{ Remaining int }
				}
			}
			PageInfo struct {
				HasNextPage bool
				EndCursor   *string
			}
		}
	}
	walk := func(t *testing.T, first int, shop any) []string {
		var got []string
		var after any
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("pagination does not end")
			}
			var p page
			s.mustDo(t, user, q, map[string]any{"first": first, "after": after, "shop": shop}, &p)
			if len(p.Vouchers.Edges) > first {
				t.Fatalf("page of %d edges for first=%d", len(p.Vouchers.Edges), first)
			}
			for _, e := range p.Vouchers.Edges {
				got = append(got, e.Node.ID)
				if shop != nil && e.Node.ShopID != shop {
					t.Fatalf("voucher of shop %s in shop %v's list", e.Node.ShopID, shop)
				}
			}
			if !p.Vouchers.PageInfo.HasNextPage {
				return got
			}
			after = *p.Vouchers.PageInfo.EndCursor
		}
	}
	t.Run("all, three at a time", func(t *testing.T) {
		if got := walk(t, 3, nil); fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("got %v, want %v", got, ids)
		}
	})
	t.Run("one shop", func(t *testing.T) {
		got := walk(t, 2, "2")
		if want := []string{ids[1], ids[3], ids[5]}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("remaining comes from redis", func(t *testing.T) {
		id, _ := strconv.ParseInt(ids[0], 10, 64)
		if err := s.rdb.Set(t.Context(), fmt.Sprintf("{v%d}:stock", id), 3, 0).Err(); err != nil {
			t.Fatal(err)
		}
		var p page
		s.mustDo(t, user, q, map[string]any{"first": 1}, &p)
		if r := p.Vouchers.Edges[0].Node.Seckill.Remaining; r != 3 {
			t.Fatalf("remaining %d, want 3", r)
		}
	})
	for _, tc := range []struct {
		name string
		vars map[string]any
	}{
		{"bad cursor", map[string]any{"after": "bogus"}},
		{"cursor of another kind", map[string]any{"after": "b3JkZXI6MQ"}}, // "order:1"
		{"first too large", map[string]any{"first": 1000}},
		{"negative first", map[string]any{"first": -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, s.do(t, user, q, tc.vars, nil), "BAD_USER_INPUT")
		})
	}
}

func TestSeckillVoucherIsPreheated(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	in := seckillInput(3, 250)
	in["perUserLimit"] = 2
	v := s.createVoucher(t, in)
	if v.Type != "SECKILL" || v.Status != "ACTIVE" || v.Seckill == nil || v.Seckill.InitialStock != 250 || v.Seckill.Remaining != 250 || v.Seckill.PerUserLimit != 2 {
		t.Fatalf("created %+v", v)
	}
	id, _ := strconv.ParseInt(v.ID, 10, 64)
	ctx := t.Context()

	var row struct {
		InitialStock int `bun:"initial_stock"`
		Stock        int `bun:"stock"`
		PerUserLimit int `bun:"per_user_limit"`
	}
	if err := s.db.NewSelect().Table("tb_seckill_voucher").Column("initial_stock", "stock", "per_user_limit").Where("voucher_id = ?", id).Scan(ctx, &row); err != nil {
		t.Fatal(err)
	}
	if row.InitialStock != 250 || row.Stock != 250 || row.PerUserLimit != 2 {
		t.Fatalf("tb_seckill_voucher row %+v", row)
	}
	var ledger int
	if err := s.db.NewSelect().Table("tb_stock_ledger").ColumnExpr("sum(delta)").Where("voucher_id = ? AND reason = 'preheat'", id).Scan(ctx, &ledger); err != nil {
		t.Fatal(err)
	}
	if ledger != 250 {
		t.Fatalf("preheat ledger %d, want 250", ledger)
	}
	if got, _ := s.rdb.Get(ctx, fmt.Sprintf("{v%d}:stock", id)).Int(); got != 250 {
		t.Fatalf("redis stock %d, want 250", got)
	}
	meta := s.rdb.HGetAll(ctx, fmt.Sprintf("{v%d}:meta", id)).Val()
	if meta["status"] != "1" || meta["limit"] != "2" || meta["initial"] != "250" || meta["begin"] != strconv.FormatInt(v.Seckill.BeginAt.UnixMilli(), 10) {
		t.Fatalf("redis meta %v", meta)
	}

	var st struct {
		Stock struct {
			VoucherID string
			Remaining int
			Sold      int
			SoldOut   bool
		}
	}
	user := s.token(t, 9, auth.RoleUser)
	s.mustDo(t, user, `query($id: ID!) { stock(voucherId: $id) { voucherId remaining sold soldOut at } }`, map[string]any{"id": v.ID}, &st)
	if st.Stock.VoucherID != v.ID || st.Stock.Remaining != 250 || st.Stock.Sold != 0 || st.Stock.SoldOut {
		t.Fatalf("stock %+v", st.Stock)
	}

	t.Run("unknown and normal vouchers have no stock", func(t *testing.T) {
		wantCode(t, s.do(t, user, `{ stock(voucherId: "999") { remaining } }`, nil, nil), "NOT_FOUND")
		var n struct{ CreateVoucher struct{ ID string } }
		s.mustDo(t, s.admin(t), `mutation { createVoucher(input: {shopId: "3", title: "plain", payValue: 1, actualValue: 2, type: NORMAL}) { id } }`, nil, &n)
		wantCode(t, s.do(t, user, `query($id: ID!) { stock(voucherId: $id) { remaining } }`, map[string]any{"id": n.CreateVoucher.ID}, nil), "NOT_FOUND")
		wantCode(t, s.do(t, user, `{ voucher(id: "999") { id } }`, nil, nil), "NOT_FOUND")
	})
}

func TestRestartRepreheatsStock(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	a := s.createVoucher(t, seckillInput(1, 40))
	b := s.createVoucher(t, seckillInput(1, 60))
	ended := seckillInput(1, 5)
	ended["beginAt"] = time.Now().Add(-2 * time.Hour).Format(time.RFC3339)
	ended["endAt"] = time.Now().Add(-time.Hour).Format(time.RFC3339)
	s.createVoucher(t, ended)
	ctx := t.Context()
	// Grabs in flight would have taken stock in Redis; preheat must never
	// reset a voucher that Redis still has.
	if err := s.rdb.DecrBy(ctx, "{v"+a.ID+"}:stock", 7).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.catalog.PreheatAll(ctx); err != nil || n != 2 {
		t.Fatalf("preheat while redis is intact: n=%d err=%v", n, err)
	}
	if got, _ := s.rdb.Get(ctx, "{v"+a.ID+"}:stock").Int(); got != 33 {
		t.Fatalf("preheat reset live stock to %d", got)
	}

	s.redis.Restart() // an empty Redis, as after a restart without persistence
	// The node's writers take their consumer names again at once: those
	// are the only keys an empty Redis gets back before the preheat.
	for _, k := range s.rdb.Keys(ctx, "*").Val() {
		if !strings.Contains(k, "consumer:") {
			t.Fatalf("redis not empty after restart: %s", k)
		}
	}
	if n, err := s.catalog.PreheatAll(ctx); err != nil || n != 2 {
		t.Fatalf("preheat after restart: n=%d err=%v", n, err)
	}
	for id, want := range map[string]int{a.ID: 40, b.ID: 60} {
		if got, _ := s.rdb.Get(ctx, "{v"+id+"}:stock").Int(); got != want {
			t.Errorf("voucher %s stock %d after re-preheat, want %d (database stock)", id, got, want)
		}
	}

	t.Run("a read repairs a voucher redis lost", func(t *testing.T) {
		if err := s.rdb.Del(ctx, "{v"+b.ID+"}:stock", "{v"+b.ID+"}:meta").Err(); err != nil {
			t.Fatal(err)
		}
		var st struct{ Stock struct{ Remaining int } }
		s.mustDo(t, s.token(t, 3, auth.RoleUser), `query($id: ID!) { stock(voucherId: $id) { remaining } }`, map[string]any{"id": b.ID}, &st)
		if st.Stock.Remaining != 60 {
			t.Fatalf("remaining %d after repair, want 60", st.Stock.Remaining)
		}
	})
}

func TestSetVoucherStatus(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 10))
	const m = `mutation($id: ID!, $st: VoucherStatus!) { setVoucherStatus(id: $id, status: $st) { id status } }`
	for _, tc := range []struct{ status, redis string }{{"PAUSED", "2"}, {"ACTIVE", "1"}, {"ENDED", "3"}} {
		t.Run(tc.status+" is stored and reaches redis as "+tc.redis, func(t *testing.T) {
			var out struct{ SetVoucherStatus struct{ ID, Status string } }
			s.mustDo(t, s.admin(t), m, map[string]any{"id": v.ID, "st": tc.status}, &out)
			if out.SetVoucherStatus.Status != tc.status {
				t.Fatalf("status %s", out.SetVoucherStatus.Status)
			}
			if got := s.rdb.HGet(t.Context(), "{v"+v.ID+"}:meta", "status").Val(); got != tc.redis {
				t.Fatalf("redis status %q, want %q", got, tc.redis)
			}
		})
	}
	t.Run("unknown voucher is not found", func(t *testing.T) {
		wantCode(t, s.do(t, s.admin(t), m, map[string]any{"id": "4242", "st": "PAUSED"}, nil), "NOT_FOUND")
	})
	t.Run("unknown status is bad input", func(t *testing.T) {
		wantCode(t, s.do(t, s.admin(t), m, map[string]any{"id": v.ID, "st": "GONE"}, nil), "BAD_USER_INPUT")
	})
}
