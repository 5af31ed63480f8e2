package orders

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/internal/lease"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

// stores are the Redis and Postgres that every node of a test shares.
type stores struct {
	db    *bun.DB
	redis *testenv.RedisServer
	rdb   *redis.Client
}

func mustStores(tb testing.TB) *stores {
	tb.Helper()
	s := &stores{db: testenv.MustPostgres(tb), redis: testenv.MustRedis(tb)}
	s.rdb = s.redis.Client()
	return s
}

// node is one service instance: its own router, order writer, services
// and lease client, over the shared stores — what a second process would
// have.
type node struct {
	t          testing.TB
	stores     *stores
	stock      *persistence.Stock
	catalog    *catalog.Service
	router     *actors.Router
	writer     *writer.Writer
	store      *persistence.Orders
	service    *Service
	locker     *lease.Redlock
	reconciler *Reconciler
	log        *slog.Logger

	name        string
	writerMu    sync.Mutex
	stopWriting func() // nil when the writer is not running
}

// startWriter starts the node's order writer (if not running).
func (n *node) startWriter() {
	n.writerMu.Lock()
	defer n.writerMu.Unlock()
	if n.stopWriting != nil {
		return
	}
	opts := writer.Options{Consumer: n.name}
	n.writer = writer.New(testenv.OrderLogFamily(n.stores.db, n.stores.rdb, opts), n.router.ActorSystem(), quiet, opts)
	if err := n.writer.Acquire(context.Background()); err != nil {
		n.t.Errorf("order writer: %v", err)
		return
	}
	if err := n.writer.Start(context.Background()); err != nil {
		n.t.Errorf("order writer: %v", err)
		return
	}
	n.stopWriting = n.writer.Stop
}

// stopWriter stops the node's order writer and waits for it.
func (n *node) stopWriter() {
	n.writerMu.Lock()
	defer n.writerMu.Unlock()
	if n.stopWriting != nil {
		n.stopWriting()
		n.stopWriting = nil
	}
}

var quiet = slog.New(slog.DiscardHandler)

func newNode(tb testing.TB, s *stores, name string, payTimeout time.Duration) *node {
	tb.Helper()
	n := &node{t: tb, stores: s, log: quiet}
	n.stock = persistence.NewStock(s.rdb)
	n.stock.ReloadHold = 50 * time.Millisecond
	n.catalog = catalog.New(persistence.NewVouchers(s.db), n.stock, quiet)
	// Patient deadlines: these tests count OKs exactly, and on a loaded
	// machine a call may outlast the production 200 ms (UNAVAILABLE by
	// design).
	n.router = actors.NewRouter(persistence.NewGrabs(s.rdb), testenv.MustOrderIDs(tb, s.db), n.catalog, quiet,
		actors.Options{CallTimeout: 2 * time.Second, BatchTimeout: 5 * time.Second})
	n.name = name
	ctx, cancel := context.WithCancel(context.Background())
	n.startWriter()
	var bg sync.WaitGroup
	events := n.stock.Subscribe(ctx)
	bg.Go(func() { _ = n.router.Follow(ctx, events) })
	tb.Cleanup(func() { n.router.Stop(); n.stopWriter(); cancel(); bg.Wait(); _ = events.Close() })
	n.store = persistence.NewOrders(s.db, s.rdb, quiet)
	n.service = New(n.store, n.catalog, Config{PayTimeout: payTimeout}, quiet)
	n.locker = lease.New([]redis.UniversalClient{s.rdb}, persistence.LeaseKey, 2*time.Second, quiet)
	n.reconciler = NewReconciler(persistence.NewReconciliations(s.db, s.rdb), n.stock, n.catalog, n.locker, ReconcileConfig{}, quiet)
	return n
}

// grab grabs for a user and returns the code and order id.
func (n *node) grab(voucherID, user int64) domain.GrabResult {
	return n.router.Grab(context.Background(), domain.GrabRequest{VoucherID: voucherID, UserID: user})
}

// drained waits until every accepted order is in the database.
func (n *node) drained() {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.writer.WaitDrained(ctx); err != nil {
		n.t.Fatalf("order log not drained: %v", err)
	}
}

// sellTo sells one unit to each user through n and returns their order
// ids, failing unless every grab is OK.
func (n *node) sellTo(voucherID int64, users []int64) map[int64]int64 {
	n.t.Helper()
	out := make(map[int64]int64, len(users))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Go(func() {
			res := n.grab(voucherID, u)
			mu.Lock()
			defer mu.Unlock()
			if res.Code != domain.SeckillOK {
				n.t.Errorf("grab for user %d: %s", u, res.Code)
				return
			}
			out[u] = res.OrderID
		})
	}
	wg.Wait()
	if n.t.Failed() {
		n.t.FailNow()
	}
	return out
}

func users(from, count int) []int64 {
	out := make([]int64, count)
	for i := range out {
		out[i] = int64(from + i)
	}
	return out
}

// mustBalanced waits until no stock change is pending for Redis and
// reconciliation of the voucher is exact, and checks that the ledger sums
// to the database's stock.
func (s *stores) mustBalanced(tb testing.TB, r *Reconciler, voucherID int64) domain.Reconciliation {
	tb.Helper()
	ctx := context.Background()
	var last domain.ReconcileReport
	deadline := time.Now().Add(10 * time.Second)
	for {
		reps, err := r.Reconcile(ctx, &voucherID, false)
		if err != nil {
			tb.Fatalf("reconcile: %v", err)
		}
		last = reps[0]
		if last.Balanced() && last.Pending == 0 && last.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("voucher %d not balanced: %+v %v", voucherID, last.Reconciliation, last.Lines)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var stock, ledger int
	if err := s.db.NewSelect().Table("tb_seckill_voucher").Column("stock").Where("voucher_id = ?", voucherID).Scan(ctx, &stock); err != nil {
		tb.Fatal(err)
	}
	if err := s.db.NewSelect().Table("tb_stock_ledger").ColumnExpr("COALESCE(SUM(delta), 0)").Where("voucher_id = ?", voucherID).Scan(ctx, &ledger); err != nil {
		tb.Fatal(err)
	}
	if ledger != stock {
		tb.Fatalf("voucher %d: ledger deltas sum to %d, stock is %d", voucherID, ledger, stock)
	}
	return last.Reconciliation
}

// redisStock is the voucher's remaining stock in Redis.
func (s *stores) redisStock(tb testing.TB, voucherID int64) int {
	tb.Helper()
	n, err := s.rdb.Get(context.Background(), "{v"+itoa(voucherID)+"}:stock").Int()
	if err != nil {
		tb.Fatalf("read redis stock: %v", err)
	}
	return n
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// mustResell sells again, through n, to buyers whose slots came back,
// waits until their orders are recorded, and checks that the database took
// every one (none dead-lettered: its per-user guard was freed too) and
// that the voucher balances with live orders in all.
func (n *node) mustResell(r *Reconciler, voucherID int64, buyers []int64, live int) {
	n.t.Helper()
	for _, u := range buyers {
		if res := n.grab(voucherID, u); res.Code != domain.SeckillOK {
			n.t.Fatalf("user %d buys again: %s", u, res.Code)
		}
	}
	n.drained()
	if rec := n.stores.mustBalanced(n.t, r, voucherID); rec.DeadLettered != 0 || rec.Live != live {
		n.t.Fatalf("after the re-sale: %+v", rec)
	}
}

// strandedReturns sells a voucher of n units to users 1..n and then has
// users 1..cancels cancel through a node whose Redis is unreachable, as
// when a node dies between its commit and its Redis step: the database
// holds the returns, Redis does not have them yet.
func strandedReturns(tb testing.TB, n, cancels int) (*stores, *node, domain.Voucher) {
	tb.Helper()
	s := mustStores(tb)
	a := newNode(tb, s, "a", time.Hour)
	v := testenv.MustVoucher(tb, s.db, s.rdb, testenv.VoucherSpec{Stock: n})
	ids := a.sellTo(v.ID, users(1, n))
	a.drained()
	proxy := testenv.MustProxy(tb, s.redis.Addr())
	proxy.Down()
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	tb.Cleanup(func() { _ = cut.Close() })
	crashing := New(persistence.NewOrders(s.db, cut, quiet), a.catalog, Config{}, quiet)
	for u := int64(1); u <= int64(cancels); u++ {
		o, err := crashing.Cancel(context.Background(), domain.Caller{UserID: u}, ids[u])
		if err != nil || o.Status != domain.OrderCancelled {
			tb.Fatalf("cancel with redis unreachable after the commit: %+v %v", o, err)
		}
	}
	return s, a, v
}
