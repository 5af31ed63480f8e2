package graph_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/persistence"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
	"flashsale/usecase/live"
)

// liveNode is one node of a cluster sharing the test's Redis and
// database (node, as production builds it), served over HTTP
// (websockets included).
type liveNode struct {
	router *actors.Router
	client *client.Client
	http   *httptest.Server
}

// newLiveNodes starts n nodes over one Redis and one database; the
// testServer is the first of them. options change each node's /query
// handler (node.Hooks.HTTP). A node's live watcher may subscribe after
// the node started: its first announcement (Missed) re-reads what its
// subscribers watch, so no change made in between is lost.
func newLiveNodes(tb testing.TB, n int, options ...func(*httpapi.HandlerOptions)) (*testServer, []*liveNode) {
	tb.Helper()
	var hooks node.Hooks
	if len(options) > 0 {
		hooks.HTTP = func(o *httpapi.HandlerOptions) {
			for _, opt := range options {
				opt(o)
			}
		}
	}
	s := launch(tb, setup{dbURL: testenv.MustPostgresURL(tb), redis: testenv.MustRedis(tb), actors: patient, gate: testGateOptions, hooks: hooks})
	nodes := make([]*liveNode, n)
	for i := range nodes {
		ns := s
		if i > 0 {
			ns = s.sibling(tb, nil, hooks)
		}
		srv := httptest.NewServer(ns.handler)
		tb.Cleanup(srv.Close)
		nodes[i] = &liveNode{router: ns.router, client: ns.client, http: srv}
	}
	return s, nodes
}

const (
	stockSub = `subscription($v: ID!) { stockChanged(voucherId: $v) { remaining soldOut } }`
	orderSub = `subscription($id: ID!) { orderChanged(orderId: $id) { id status } }`
)

// subscribeWS starts operation id on an initialised connection.
func subscribeWS(tb testing.TB, c *websocket.Conn, id, query string, vars map[string]any) {
	tb.Helper()
	payload, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	nodetest.SendWS(tb, c, fmt.Sprintf(`{"id":%q,"type":"subscribe","payload":%s}`, id, payload))
}

// nextData waits for the next data of operation id and decodes it into
// out; an error message fails the test.
func nextData(tb testing.TB, c *websocket.Conn, id string, within time.Duration, out any) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		m, err := nodetest.ReadWS(c, time.Until(deadline))
		if err != nil {
			tb.Fatalf("waiting for operation %s: %v", id, err)
		}
		if m.ID != id {
			continue
		}
		if m.Type != "next" {
			tb.Fatalf("operation %s: %s %s", id, m.Type, m.Payload)
		}
		var res struct {
			Data   json.RawMessage
			Errors []gqlError
		}
		if err := json.Unmarshal(m.Payload, &res); err != nil || len(res.Errors) > 0 {
			tb.Fatalf("operation %s: %s (%v)", id, m.Payload, err)
		}
		if err := json.Unmarshal(res.Data, out); err != nil {
			tb.Fatal(err)
		}
		return
	}
}

type stockEvent struct {
	remaining int
	soldOut   bool
	at        time.Time
}

func nextStock(tb testing.TB, c *websocket.Conn, id string, within time.Duration) stockEvent {
	tb.Helper()
	var d struct {
		StockChanged struct {
			Remaining int
			SoldOut   bool
		}
	}
	nextData(tb, c, id, within, &d)
	return stockEvent{d.StockChanged.Remaining, d.StockChanged.SoldOut, time.Now()}
}

// A subscriber on either node sees the sales made on node 1: at once the
// current stock, then coalesced changes ending on sold out.
func TestStockChangedFollowsSalesOfEveryNode(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 2)
	const stock = 20
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: stock})
	vid := strconv.FormatInt(v.ID, 10)
	user := s.token(t, 2, auth.RoleUser)

	var conns []*websocket.Conn
	for _, n := range nodes {
		c := nodetest.InitWS(t, n.http, user)
		start := time.Now()
		subscribeWS(t, c, "s", stockSub, map[string]any{"v": vid})
		first := nextStock(t, c, "s", time.Second)
		t.Logf("first event after %s", first.at.Sub(start))
		if first.remaining != stock || first.soldOut {
			t.Fatalf("first event %+v, want remaining %d", first, stock)
		}
		conns = append(conns, c)
	}
	// Both subscribers read while the sales, on node 1 only, run over
	// about 500 ms.
	type result struct {
		events []stockEvent
		err    error
	}
	results := make([]chan result, len(conns))
	for i, c := range conns {
		results[i] = make(chan result, 1)
		go func() {
			events, err := collectStock(c, "s", 5*time.Second)
			results[i] <- result{events, err}
		}()
	}
	for i := range stock {
		if res := nodes[1].router.Grab(context.Background(), domain.GrabRequest{VoucherID: v.ID, UserID: int64(100 + i)}); res.Code != domain.SeckillOK {
			t.Fatalf("grab %d: %s", i, res.Code)
		}
		time.Sleep(25 * time.Millisecond)
	}
	sold := time.Now()
	for i := range conns {
		r := <-results[i]
		if r.err != nil {
			t.Fatalf("subscriber on node %d: %v", i, r.err)
		}
		got := r.events
		last := got[len(got)-1]
		span := last.at.Sub(got[0].at)
		t.Logf("subscriber on node %d, %d sales: %d events over %s, last %s after the last sale", i, stock, len(got), span, last.at.Sub(sold))
		if !last.soldOut {
			t.Fatalf("remaining 0 but soldOut false")
		}
		if limit := int(span/live.StockIntervalDefault) + 2; len(got) > limit || len(got) > stock {
			t.Fatalf("%d events over %s, want at most %d", len(got), span, limit)
		}
		for j := 1; j < len(got); j++ {
			if got[j].remaining >= got[j-1].remaining {
				t.Fatalf("events %+v do not fall", got)
			}
		}
	}
}

// collectStock reads the stock events of operation id until sold out.
func collectStock(c *websocket.Conn, id string, within time.Duration) ([]stockEvent, error) {
	deadline := time.Now().Add(within)
	var got []stockEvent
	for {
		m, err := nodetest.ReadWS(c, time.Until(deadline))
		if err != nil {
			return got, fmt.Errorf("after %d events: %w", len(got), err)
		}
		if m.ID != id {
			continue
		}
		var res struct {
			Data struct {
				StockChanged struct {
					Remaining int
					SoldOut   bool
				}
			}
		}
		if m.Type != "next" || json.Unmarshal(m.Payload, &res) != nil {
			return got, fmt.Errorf("%s %s", m.Type, m.Payload)
		}
		e := stockEvent{res.Data.StockChanged.Remaining, res.Data.StockChanged.SoldOut, time.Now()}
		got = append(got, e)
		if e.remaining == 0 {
			return got, nil
		}
	}
}

// Every change of an order reaches its owner's subscription on another
// node: paid, cancelled by the owner, cancelled at the pay timeout.
func TestOrderChangedFollowsTheOrderAcrossNodes(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 2)
	const owner = 7
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 10, Limit: 3})
	var ids []string
	for range 3 {
		res := nodes[0].router.Grab(context.Background(), domain.GrabRequest{VoucherID: v.ID, UserID: owner})
		if res.Code != domain.SeckillOK {
			t.Fatalf("grab: %s", res.Code)
		}
		ids = append(ids, strconv.FormatInt(res.OrderID, 10))
	}
	testenv.Drained(t, s.writer, time.Minute)
	token := s.token(t, owner, auth.RoleUser)
	timeouts := persistence.NewOrders(s.db, s.rdb, slog.New(slog.DiscardHandler))

	cases := []struct {
		name   string
		id     string
		change func(t *testing.T)
		want   string
	}{
		{"paid", ids[0], func(t *testing.T) {
			var out any
			if err := nodes[1].client.Post(payMutation, &out, client.Var("id", ids[0]), client.AddHeader("Authorization", "Bearer "+token)); err != nil {
				t.Fatal(err)
			}
		}, "PAID"},
		{"cancelled by the owner", ids[1], func(t *testing.T) {
			var out any
			if err := nodes[1].client.Post(cancelMut, &out, client.Var("id", ids[1]), client.AddHeader("Authorization", "Bearer "+token)); err != nil {
				t.Fatal(err)
			}
		}, "CANCELLED"},
		{"timed out", ids[2], func(t *testing.T) {
			// The pay-timeout job's cancellation, its deadline moved to now.
			if _, err := timeouts.CancelDue(context.Background(), time.Now().Add(time.Hour), 10, time.Now()); err != nil {
				t.Fatal(err)
			}
		}, "CANCELLED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := nodetest.InitWS(t, nodes[0].http, token)
			subscribeWS(t, c, "o", orderSub, map[string]any{"id": tc.id})
			var d struct{ OrderChanged struct{ ID, Status string } }
			nextData(t, c, "o", time.Second, &d)
			if d.OrderChanged.ID != tc.id || d.OrderChanged.Status != "UNPAID" {
				t.Fatalf("first event %+v, want order %s UNPAID", d.OrderChanged, tc.id)
			}
			tc.change(t)
			nextData(t, c, "o", 3*time.Second, &d)
			if d.OrderChanged.Status != tc.want {
				t.Fatalf("after the change %+v, want %s", d.OrderChanged, tc.want)
			}
		})
	}
}

// orderChanged follows the order query's rule: the owner or an admin;
// anyone else hears NOT_FOUND, as for an unknown id.
func TestOrderChangedAuthorization(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 1)
	const owner, other = 7, 8
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 10})
	res := nodes[0].router.Grab(context.Background(), domain.GrabRequest{VoucherID: v.ID, UserID: owner})
	if res.Code != domain.SeckillOK {
		t.Fatalf("grab: %s", res.Code)
	}
	id := strconv.FormatInt(res.OrderID, 10)
	cases := []struct {
		name, token, id, code string // code "" = allowed
	}{
		{"owner", s.token(t, owner, auth.RoleUser), id, ""},
		{"admin", s.admin(t), id, ""},
		{"other user", s.token(t, other, auth.RoleUser), id, "NOT_FOUND"},
		{"unknown order", s.token(t, owner, auth.RoleUser), "999999999", "NOT_FOUND"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := nodetest.InitWS(t, nodes[0].http, tc.token)
			subscribeWS(t, c, "o", orderSub, map[string]any{"id": tc.id})
			m := nodetest.ReadUntil(t, c, "next", "error")
			if tc.code == "" {
				if m.Type != "next" || !json.Valid(m.Payload) || string(m.Payload) == "" {
					t.Fatalf("got %s %s, want the order", m.Type, m.Payload)
				}
				var p struct{ Errors []gqlError }
				_ = json.Unmarshal(m.Payload, &p)
				if len(p.Errors) > 0 {
					t.Fatalf("got errors %+v", p.Errors)
				}
				return
			}
			var errs []gqlError
			if m.Type == "next" {
				var p struct{ Errors []gqlError }
				_ = json.Unmarshal(m.Payload, &p)
				errs = p.Errors
			} else {
				_ = json.Unmarshal(m.Payload, &errs)
			}
			wantCode(t, errs, tc.code)
		})
	}
}

// Not parallel: it counts the process's goroutines and heap.
func TestClosingSubscriptionsReturnsGoroutinesAndMemory(t *testing.T) {
	s, nodes := newLiveNodes(t, 1)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 10})
	vid := strconv.FormatInt(v.ID, 10)
	user := s.token(t, 2, auth.RoleUser)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC() // the second frees what sync.Pools dropped in the first
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const subs, perConn = 200, 25
	open := func(subs int) []*websocket.Conn {
		var conns []*websocket.Conn
		for i := 0; i < subs; i += perConn {
			c := nodetest.InitWS(t, nodes[0].http, user)
			for j := range perConn {
				subscribeWS(t, c, strconv.Itoa(j), stockSub, map[string]any{"v": vid})
			}
			for range perConn {
				nodetest.ReadUntil(t, c, "next")
			}
			conns = append(conns, c)
		}
		return conns
	}
	closeAll := func(conns []*websocket.Conn) {
		for _, c := range conns {
			_ = c.Close(websocket.StatusNormalClosure, "")
		}
	}
	// One whole round first, so that the baseline has what a first round
	// fills and keeps by design (the parsed query, the websocket library's
	// pools, maps grown to 200 entries, which Go never shrinks): a leak
	// grows with every round, and the second round is measured against
	// the first.
	closeAll(open(subs))
	waitGoroutines(0, 500*time.Millisecond)
	baseline, baseHeap := runtime.NumGoroutine(), heap()

	gaugeBefore := subscriptionsOpen(t)
	conns := open(subs)
	held, heldHeap := runtime.NumGoroutine()-baseline, heap()
	if got := subscriptionsOpen(t) - gaugeBefore; got != subs {
		t.Fatalf("flashsale_subscriptions_open rose by %v for %d subscriptions", got, subs)
	}
	t.Logf("%d subscriptions: %d goroutines and %d KB more", subs, held, (int64(heldHeap)-int64(baseHeap))/1024)
	if held < subs {
		t.Fatalf("%d subscriptions hold only %d goroutines: are they running?", subs, held)
	}
	closeAll(conns)
	if n := waitGoroutines(baseline+5, 10*time.Second); n > baseline+5 {
		t.Fatalf("after closing, %d goroutines, baseline %d", n, baseline)
	}
	testenv.WaitFor(t, "flashsale_subscriptions_open back to its baseline", func() bool { return subscriptionsOpen(t) == gaugeBefore })
	after := heap()
	t.Logf("after closing: heap %d KB, baseline %d KB", after/1024, baseHeap/1024)
	if after > baseHeap+1<<20 {
		t.Fatalf("after closing, heap %d KB, baseline %d KB", after/1024, baseHeap/1024)
	}
}

// A client that stops reading: its connection's writes block (as on a
// socket whose buffers are full) from the moment it has its first events.
// The subscribers on other connections still see every change on time,
// and the stuck connection is dropped at the write deadline.
func TestStockSubscriberThatStopsReadingDelaysNoOne(t *testing.T) {
	t.Parallel()
	const writeTimeout = 2 * time.Second
	s, nodes := newLiveNodes(t, 1, func(o *httpapi.HandlerOptions) { o.WebsocketWriteTimeout = writeTimeout })
	const stock = 20
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: stock})
	vid := strconv.FormatInt(v.ID, 10)
	user := s.token(t, 2, auth.RoleUser)

	var open atomic.Int32
	h := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open.Add(1)
		defer open.Add(-1)
		nodes[0].http.Config.Handler.ServeHTTP(w, r)
	}))
	stall := &stallingListener{Listener: h.Listener}
	h.Listener = stall
	h.Start()
	t.Cleanup(h.Close)
	stuck := nodetest.InitWS(t, h, user)
	for i := range httpapi.WebsocketMaxOperationsDefault {
		subscribeWS(t, stuck, strconv.Itoa(i), stockSub, map[string]any{"v": vid})
	}
	for range httpapi.WebsocketMaxOperationsDefault {
		nodetest.ReadUntil(t, stuck, "next")
	}
	stall.stalled.Store(true) // from here on nothing reaches the stuck client

	var conns []*websocket.Conn
	for range 2 {
		c := nodetest.InitWS(t, nodes[0].http, user)
		subscribeWS(t, c, "s", stockSub, map[string]any{"v": vid})
		nextStock(t, c, "s", time.Second)
		conns = append(conns, c)
	}
	type result struct {
		events []stockEvent
		err    error
	}
	results := make(chan result, len(conns))
	for _, c := range conns {
		go func() {
			events, err := collectStock(c, "s", 5*time.Second)
			results <- result{events, err}
		}()
	}
	for i := range stock {
		if res := nodes[0].router.Grab(context.Background(), domain.GrabRequest{VoucherID: v.ID, UserID: int64(100 + i)}); res.Code != domain.SeckillOK {
			t.Fatalf("grab %d: %s", i, res.Code)
		}
		time.Sleep(40 * time.Millisecond)
	}
	sold := time.Now()
	for range conns {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		last := r.events[len(r.events)-1]
		t.Logf("%d events, the last %s after the last sale", len(r.events), last.at.Sub(sold))
		if late := last.at.Sub(sold); late > 2*live.StockIntervalDefault {
			t.Fatalf("sold out seen %s after the last sale", late)
		}
	}
	if stall.blocked.Load() == 0 {
		t.Fatal("no write to the stuck client blocked: the test proves nothing")
	}
	deadline := time.Now().Add(writeTimeout + 3*time.Second)
	testenv.WaitFor(t, "the stuck client is disconnected", func() bool { return open.Load() == 0 })
	if time.Now().After(deadline) {
		t.Fatal("the stuck client was still connected after the write deadline")
	}
}

// stallingListener's connections, once stalled is set, block every write
// until the write deadline (or Close), as a socket whose buffers a client
// no longer drains; blocked counts those writes.
type stallingListener struct {
	net.Listener
	stalled atomic.Bool
	blocked atomic.Int32
}

func (l *stallingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallingConn{Conn: c, l: l, closed: make(chan struct{})}, nil
}

type stallingConn struct {
	net.Conn
	l        *stallingListener
	mu       sync.Mutex
	deadline time.Time
	once     sync.Once
	closed   chan struct{}
}

func (c *stallingConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallingConn) Write(p []byte) (int, error) {
	if !c.l.stalled.Load() {
		return c.Conn.Write(p)
	}
	c.l.blocked.Add(1)
	c.mu.Lock()
	d := c.deadline
	c.mu.Unlock()
	if d.IsZero() {
		<-c.closed
		return 0, net.ErrClosed
	}
	select {
	case <-time.After(time.Until(d)):
		return 0, os.ErrDeadlineExceeded
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *stallingConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// An order still in the order log is shown at once; its subscriber hears
// again when the order writer has recorded it in the database.
func TestOrderChangedSeesTheOrderRecorded(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 1)
	const owner = 7
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 10})
	// The writer waits for the voucher's row lock, held here.
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(context.Background(), "SELECT 1 FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE", v.ID); err != nil {
		t.Fatal(err)
	}
	res := nodes[0].router.Grab(context.Background(), domain.GrabRequest{VoucherID: v.ID, UserID: owner})
	if res.Code != domain.SeckillOK {
		t.Fatalf("grab: %s", res.Code)
	}
	id := strconv.FormatInt(res.OrderID, 10)
	c := nodetest.InitWS(t, nodes[0].http, s.token(t, owner, auth.RoleUser))
	subscribeWS(t, c, "o", orderSub, map[string]any{"id": id})
	var d struct{ OrderChanged struct{ ID, Status string } }
	nextData(t, c, "o", time.Second, &d)
	if d.OrderChanged.Status != "UNPAID" {
		t.Fatalf("first event %+v, want UNPAID", d.OrderChanged)
	}
	var n int
	if err := s.db.NewSelect().Table("tb_voucher_order").ColumnExpr("count(*)").Where("id = ?", res.OrderID).Scan(context.Background(), &n); err != nil || n != 0 {
		t.Fatalf("order already in the database (%d, %v): the test proves nothing", n, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	nextData(t, c, "o", 3*time.Second, &d)
	if d.OrderChanged.ID != id || d.OrderChanged.Status != "UNPAID" {
		t.Fatalf("after recording %+v, want order %s UNPAID", d.OrderChanged, id)
	}
}

// waitGoroutines waits until at most want goroutines run, and returns how
// many run.
func waitGoroutines(want int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// subscriptionsOpen reads the flashsale_subscriptions_open gauge.
func subscriptionsOpen(tb testing.TB) float64 {
	tb.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "flashsale_subscriptions_open" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	tb.Fatal("flashsale_subscriptions_open is not registered")
	return 0
}
