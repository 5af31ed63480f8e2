package graph_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

const grabMutation = `mutation($id: ID!) { seckillVoucher(voucherId: $id) { code orderId message } }`

// keyedGrabMutation is a grab with its request id, which a client sends
// again after UNAVAILABLE: a grab that sold is answered its order again.
const keyedGrabMutation = `mutation($id: ID!, $req: String) { seckillVoucher(voucherId: $id, requestId: $req) { code orderId message } }`

type grabOutcome struct {
	user    int64
	voucher string
	code    string
	orderID string
	// ticket, if set, is sent with the grab; a grab with one may be
	// refused with a GraphQL error, whose code is then its code.
	ticket string
	// retry sends the grab with a request id and asks again while it is
	// answered UNAVAILABLE.
	retry bool
}

// grabAll sends every (user, voucher) grab through the GraphQL handler
// from many goroutines at once, in random order.
func (s *testServer) grabAll(tb testing.TB, jobs []grabOutcome, workers int) []grabOutcome {
	tb.Helper()
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	tokens := sync.Map{}
	token := func(u int64) string {
		if t, ok := tokens.Load(u); ok {
			return t.(string)
		}
		t, _ := s.tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
		tokens.Store(u, t)
		return t
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := range next {
				j := &jobs[i]
				query, vars := grabMutation, map[string]any{"id": j.voucher}
				if j.ticket != "" {
					query, vars["ticket"] = ticketGrabMutation, j.ticket
				} else if j.retry {
					query, vars["req"] = keyedGrabMutation, "g"+strconv.Itoa(i)
				}
				rec := s.post(token(j.user), query, vars)
				// A client asks again after UNAVAILABLE (a Redis call that
				// failed on a machine too loaded for its deadlines), with
				// the same request id.
				for try := 0; j.retry && try < 50 && strings.Contains(rec.Body.String(), `"code":"UNAVAILABLE"`); try++ {
					time.Sleep(50 * time.Millisecond)
					rec = s.post(token(j.user), query, vars)
				}
				var resp struct {
					Data struct {
						SeckillVoucher struct {
							Code    string
							OrderID *string
						}
					}
					Errors []gqlError
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &resp); err == nil && len(resp.Errors) == 1 && j.ticket != "" {
					j.code = resp.Errors[0].code()
					continue
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp.Errors) > 0 {
					tb.Errorf("grab: %v %+v %s", err, resp.Errors, rec.Body.String())
					continue
				}
				j.code = resp.Data.SeckillVoucher.Code
				if resp.Data.SeckillVoucher.OrderID != nil {
					j.orderID = *resp.Data.SeckillVoucher.OrderID
				}
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	return jobs
}

// checkSale asserts the invariants of one voucher after a sale: OK answers
// within stock and per-user limit, unique order ids, and — once the log is
// drained — exactly those orders in the database with reconciled stock.
func (s *testServer) checkSale(tb testing.TB, voucherID string, stock, limit int, outcomes []grabOutcome) (ok int) {
	tb.Helper()
	perUser := map[int64]int{}
	orderIDs := map[string]bool{}
	for _, o := range outcomes {
		if o.voucher != voucherID {
			continue
		}
		switch o.code {
		case "OK":
			ok++
			perUser[o.user]++
			if o.orderID == "" || orderIDs[o.orderID] {
				tb.Fatalf("order id %q missing or repeated", o.orderID)
			}
			orderIDs[o.orderID] = true
		case "SOLD_OUT", "LIMIT_REACHED":
		default:
			tb.Fatalf("unexpected outcome %s for user %d", o.code, o.user)
		}
	}
	if ok > stock {
		tb.Fatalf("voucher %s oversold: %d OK for stock %d", voucherID, ok, stock)
	}
	for u, n := range perUser {
		if n > limit {
			tb.Fatalf("user %d holds %d orders, limit %d", u, n, limit)
		}
	}
	testenv.Drained(tb, s.writer, time.Minute)
	ctx := context.Background()
	var ids []int64
	if err := s.db.NewSelect().Table("tb_voucher_order").Column("id").Where("voucher_id = ?", voucherID).Scan(ctx, &ids); err != nil {
		tb.Fatal(err)
	}
	if len(ids) != ok {
		tb.Fatalf("voucher %s: %d orders in the database, %d answered OK", voucherID, len(ids), ok)
	}
	for _, id := range ids {
		if !orderIDs[strconv.FormatInt(id, 10)] {
			tb.Fatalf("order %d in the database was never answered OK", id)
		}
	}
	var row struct {
		Initial int `bun:"initial_stock"`
		Stock   int `bun:"stock"`
	}
	if err := s.db.NewSelect().Table("tb_seckill_voucher").Column("initial_stock", "stock").Where("voucher_id = ?", voucherID).Scan(ctx, &row); err != nil {
		tb.Fatal(err)
	}
	remaining, _ := s.rdb.Get(ctx, "{v"+voucherID+"}:stock").Int()
	if row.Initial != stock || row.Initial != row.Stock+ok || remaining != stock-ok {
		tb.Fatalf("voucher %s: initial %d, db stock %d, redis remaining %d, live orders %d", voucherID, row.Initial, row.Stock, remaining, ok)
	}
	return ok
}

// Not parallel, nor are its cases: it keeps every core busy (128 clients,
// tens of thousands of grabs), and beside another such test both only run
// slower. Go runs it before the parallel tests, alone.
func TestConcurrentGrabsThroughGraphQL(t *testing.T) {
	cases := []struct {
		name                    string
		stock, limit            int
		users, attempts, wantOK int
		everyUserGetsTheirLimit bool
	}{
		{name: "one per person, demand far above stock", stock: 1000, limit: 1, users: 20_000, attempts: 2, wantOK: 1000},
		{name: "three per person, stock above demand", stock: 5000, limit: 3, users: 1000, attempts: 5, wantOK: 3000, everyUserGetsTheirLimit: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			in := seckillInput(1, tc.stock)
			in["perUserLimit"] = tc.limit
			v := s.createVoucher(t, in)
			jobs := make([]grabOutcome, 0, tc.users*tc.attempts)
			for u := 1; u <= tc.users; u++ {
				for a := 0; a < tc.attempts; a++ {
					jobs = append(jobs, grabOutcome{user: int64(u), voucher: v.ID})
				}
			}
			out := s.grabAll(t, jobs, 128)
			if ok := s.checkSale(t, v.ID, tc.stock, tc.limit, out); ok != tc.wantOK {
				t.Fatalf("%d OK, want %d", ok, tc.wantOK)
			}
			if tc.everyUserGetsTheirLimit {
				per := map[int64]int{}
				for _, o := range out {
					if o.code == "OK" {
						per[o.user]++
					}
				}
				for u := int64(1); u <= int64(tc.users); u++ {
					if per[u] != tc.limit {
						t.Fatalf("user %d got %d orders, want %d", u, per[u], tc.limit)
					}
				}
			}
		})
	}
}

// Not parallel, like TestConcurrentGrabsThroughGraphQL: it keeps every
// core busy.
func TestManyVouchersSellAtOnce(t *testing.T) {
	s := newServer(t)
	const vouchers, users = 50, 120
	stocks := map[string]int{}
	var jobs []grabOutcome
	for i := 0; i < vouchers; i++ {
		stock := 1 + rand.IntN(150)
		v := s.createVoucher(t, seckillInput(1+i%5, stock))
		stocks[v.ID] = stock
		for u := 1; u <= users; u++ {
			jobs = append(jobs, grabOutcome{user: int64(u), voucher: v.ID, retry: true})
		}
	}
	out := s.grabAll(t, jobs, 128)
	for id, stock := range stocks {
		if ok := s.checkSale(t, id, stock, 1, out); ok != min(stock, users) {
			t.Fatalf("voucher %s: %d OK, want %d", id, ok, min(stock, users))
		}
	}
}

func TestGrabOutcomesThroughGraphQL(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	user := s.token(t, 77, auth.RoleUser)
	grab := func(id string) (string, *string) {
		var out struct {
			SeckillVoucher struct {
				Code    string
				OrderID *string
				Message string
			}
		}
		s.mustDo(t, user, grabMutation, map[string]any{"id": id}, &out)
		if out.SeckillVoucher.Message == "" {
			t.Fatal("empty message")
		}
		return out.SeckillVoucher.Code, out.SeckillVoucher.OrderID
	}
	now := time.Now().UTC()
	future := seckillInput(1, 5)
	future["beginAt"], future["endAt"] = now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339)
	past := seckillInput(1, 5)
	past["beginAt"], past["endAt"] = now.Add(-2*time.Hour).Format(time.RFC3339), now.Add(-time.Hour).Format(time.RFC3339)
	live := s.createVoucher(t, seckillInput(1, 5))
	var normal struct{ CreateVoucher struct{ ID string } }
	s.mustDo(t, s.admin(t), `mutation { createVoucher(input: {shopId: "1", title: "plain", payValue: 1, actualValue: 2, type: NORMAL}) { id } }`, nil, &normal)

	for _, tc := range []struct{ name, id, want string }{
		{"not started", s.createVoucher(t, future).ID, "NOT_STARTED"},
		{"ended", s.createVoucher(t, past).ID, "ENDED"},
		{"unknown", "987654", "NOT_FOUND"},
		{"normal voucher", normal.CreateVoucher.ID, "NOT_FOUND"},
		{"live voucher sells", live.ID, "OK"},
		{"second grab of the same user reaches the limit", live.ID, "LIMIT_REACHED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, orderID := grab(tc.id)
			if code != tc.want || (code == "OK") != (orderID != nil) {
				t.Fatalf("code %s order %v, want %s", code, orderID, tc.want)
			}
		})
	}
	t.Run("paused, also for an actor that cached ACTIVE", func(t *testing.T) {
		const m = `mutation($id: ID!, $st: VoucherStatus!) { setVoucherStatus(id: $id, status: $st) { status } }`
		s.mustDo(t, s.admin(t), m, map[string]any{"id": live.ID, "st": "PAUSED"}, nil)
		if code, _ := grab(live.ID); code != "PAUSED" {
			t.Fatalf("got %s", code)
		}
		s.mustDo(t, s.admin(t), m, map[string]any{"id": live.ID, "st": "ACTIVE"}, nil)
		deadline := time.Now().Add(5 * time.Second)
		for {
			code, _ := grab(live.ID)
			if code == "LIMIT_REACHED" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %s after resuming", code)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("bad voucher id is bad input", func(t *testing.T) {
		wantCode(t, s.do(t, user, grabMutation, map[string]any{"id": "-3"}, nil), "BAD_USER_INPUT")
	})
	t.Run("needs a token", func(t *testing.T) {
		wantCode(t, s.do(t, "", grabMutation, map[string]any{"id": live.ID}, nil), "UNAUTHENTICATED")
	})
}
