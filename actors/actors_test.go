package actors_test

import (
	"cmp"
	"context"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

var quiet = testenv.QuietLogger()

type env struct {
	db      *bun.DB
	redis   *testenv.RedisServer
	rdb     *redis.Client
	catalog *catalog.Service
}

// follow has r follow the voucher events until the test ends; it returns
// once the subscription is confirmed, so an announcement made after it
// reaches r.
func follow(tb testing.TB, r *actors.Router, rdb redis.UniversalClient) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := persistence.NewStock(rdb).Subscribe(ctx)
	if an, err := events.Next(ctx); err != nil || an.Kind != domain.Missed {
		tb.Fatalf("voucher events subscription: first announcement %+v, %v; want the subscription's", an, err)
	}
	r.Resync()
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Follow(ctx, events) }()
	tb.Cleanup(func() { cancel(); <-done; _ = events.Close() })
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	e := &env{db: testenv.MustPostgres(tb), redis: testenv.MustRedis(tb)}
	e.rdb = e.redis.Client()
	e.catalog = catalog.New(persistence.NewVouchers(e.db), quickStock(e.rdb), quiet)
	return e
}

// quickStock is the stock store with a reload hold of 200 ms instead of
// 15 s: long enough to be seen, short enough for a test to wait out.
func quickStock(rdb redis.UniversalClient) *persistence.Stock {
	s := persistence.NewStock(rdb)
	s.ReloadHold = 200 * time.Millisecond
	return s
}

// router starts a router (its own actor system, as a second node would
// have) on its own client, whose commands cnt counts if not nil.
func (e *env) router(tb testing.TB, cnt *testenv.Counter, opts actors.Options) *actors.Router {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	if cnt != nil {
		rdb.AddHook(cnt)
	}
	// Patient deadlines unless a test sets its own: these tests count
	// outcomes exactly, and a call on a machine loaded by the race
	// detector may outlast the production 200 ms (UNAVAILABLE by design).
	opts.CallTimeout = cmp.Or(opts.CallTimeout, 2*time.Second)
	opts.BatchTimeout = cmp.Or(opts.BatchTimeout, 5*time.Second)
	r := actors.NewRouter(persistence.NewGrabs(rdb), testenv.MustOrderIDs(tb, e.db), e.catalog, quiet, opts)
	tb.Cleanup(func() { r.Stop(); _ = rdb.Close() })
	_ = r.Start(tb.Context())
	return r
}

// writer runs an order writer on the env's stores until the test ends.
func (e *env) writer(tb testing.TB) *writer.Writer {
	tb.Helper()
	return testenv.StartOrderWriter(tb, e.db, e.rdb, writer.Options{MaxBackoff: 200 * time.Millisecond})
}

// voucher creates and preheats a seckill voucher (the tests' one fixture).
func (e *env) voucher(tb testing.TB, stock, limit int, begin, end time.Time) int64 {
	tb.Helper()
	return testenv.MustVoucher(tb, e.db, e.rdb, testenv.VoucherSpec{Stock: stock, Limit: limit, Begin: begin, End: end}).ID
}

func (e *env) live(tb testing.TB, stock, limit int) int64 {
	return e.voucher(tb, stock, limit, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}

// mustSell grabs the voucher once for each user and fails the test unless
// each is sold.
func mustSell(tb testing.TB, r *actors.Router, voucherID int64, users ...int64) {
	tb.Helper()
	for _, u := range users {
		if c := r.Grab(context.Background(), domain.GrabRequest{VoucherID: voucherID, UserID: u}).Code; c != domain.SeckillOK {
			tb.Fatalf("user %d: %s, want OK", u, c)
		}
	}
}

func TestSoldOutIsAnsweredWithoutRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 20, 1)
	var cnt testenv.Counter
	r := e.router(t, &cnt, actors.Options{})
	ok := 0
	for u := int64(1); u <= 25; u++ {
		if r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: u}).Code == domain.SeckillOK {
			ok++
		}
	}
	if ok != 20 {
		t.Fatalf("%d OK, want 20", ok)
	}
	before := cnt.Commands.Load()
	var wg sync.WaitGroup
	for u := int64(100); u < 1100; u++ {
		wg.Go(func() {
			if c := r.Grab(context.Background(), domain.GrabRequest{VoucherID: id, UserID: u}).Code; c != domain.SeckillSoldOut {
				t.Errorf("user %d: %s, want SOLD_OUT", u, c)
			}
		})
	}
	wg.Wait()
	if calls := cnt.Commands.Load() - before; calls != 0 {
		t.Fatalf("1000 sold-out grabs made %d Redis calls, want 0", calls)
	}
}

func TestCachedAnswersFollowStatusChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 100, 5)
	r := e.router(t, nil, actors.Options{})
	ctx := t.Context()
	grab := func(u int64) domain.SeckillCode {
		return r.Grab(ctx, domain.GrabRequest{VoucherID: id, UserID: u}).Code
	}
	if c := grab(1); c != domain.SeckillOK {
		t.Fatalf("first grab %s", c)
	}
	// The actor cached ACTIVE; no event reaches it here (nobody watches),
	// so the script itself must refuse.
	if _, err := e.catalog.SetStatus(ctx, id, domain.StatusPaused); err != nil {
		t.Fatal(err)
	}
	if c := grab(2); c != domain.SeckillPaused {
		t.Fatalf("grab on a paused voucher: %s", c)
	}
	if c := grab(3); c != domain.SeckillPaused { // now from memory
		t.Fatalf("second grab on a paused voucher: %s", c)
	}
	// Resuming announces the change; the router's subscription delivers it.
	follow(t, r, e.rdb)
	if _, err := e.catalog.SetStatus(ctx, id, domain.StatusActive); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the resumed voucher to sell", func() bool { return grab(4) == domain.SeckillOK })
	if _, err := e.catalog.SetStatus(ctx, id, domain.StatusEnded); err != nil {
		t.Fatal(err)
	}
	if c := grab(5); c != domain.SeckillEnded {
		t.Fatalf("grab on an ended voucher: %s", c)
	}
}

func TestWindowIsAnsweredFromMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	early := e.voucher(t, 10, 1, now.Add(time.Hour), now.Add(2*time.Hour))
	late := e.voucher(t, 10, 1, now.Add(-2*time.Hour), now.Add(-time.Hour))
	var cnt testenv.Counter
	r := e.router(t, &cnt, actors.Options{})
	grab := func(id int64) domain.SeckillCode {
		return r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 1}).Code
	}
	for _, tc := range []struct {
		name string
		id   int64
		want domain.SeckillCode
	}{
		{"a sale that has not started answers NOT_STARTED", early, domain.SeckillNotStarted},
		{"a sale that has ended answers ENDED", late, domain.SeckillEnded},
		{"an id that is no voucher answers NOT_FOUND", 424242, domain.SeckillNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := grab(tc.id); c != tc.want { // activates the voucher's actor
				t.Errorf("voucher %d: %s, want %s", tc.id, c, tc.want)
			}
			before := cnt.Commands.Load()
			if c := grab(tc.id); c != tc.want {
				t.Errorf("voucher %d again: %s, want %s", tc.id, c, tc.want)
			}
			if calls := cnt.Commands.Load() - before; calls != 0 {
				t.Errorf("voucher %d: the answer from the running actor made %d Redis calls, want 0", tc.id, calls)
			}
		})
	}
	// Created last, just before its first grab, and starting seconds later:
	// a slow create cannot make the grab land after the start.
	soon := e.voucher(t, 10, 1, time.Now().Add(3*time.Second), time.Now().Add(time.Hour))
	if c := grab(soon); c != domain.SeckillNotStarted {
		t.Fatalf("voucher %d before the start: %s, want %s", soon, c, domain.SeckillNotStarted)
	}
	// The actor cached NOT_STARTED; once the start passes it must sell.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := grab(soon)
		if c == domain.SeckillOK {
			break
		}
		if c != domain.SeckillNotStarted || time.Now().After(deadline) {
			t.Fatalf("after the start: %s", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTwoActivationsNeverOversell(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const stock = 300
	id := e.live(t, stock, 1)
	a := e.router(t, nil, actors.Options{})
	b := e.router(t, nil, actors.Options{})
	ctx := t.Context()

	if c := a.Grab(ctx, domain.GrabRequest{VoucherID: id, UserID: 1}).Code; c != domain.SeckillOK {
		t.Fatalf("first activation: %s", c)
	}
	if c := b.Grab(ctx, domain.GrabRequest{VoucherID: id, UserID: 2}).Code; c != domain.SeckillOK { // claims a newer fence
		t.Fatalf("second activation: %s", c)
	}
	// a's activation holds fence 1, b's fence 2: a's next batch is refused
	// in Redis, a's activation stops and hands the grab to a fresh
	// activation (fence 3), which sells it.
	if c := a.Grab(ctx, domain.GrabRequest{VoucherID: id, UserID: 3}).Code; c != domain.SeckillOK {
		t.Fatalf("grab through the superseded node answered %s", c)
	}
	if fence, _ := e.rdb.Get(ctx, "{v"+strconv.FormatInt(id, 10)+"}:fence").Int(); fence != 3 {
		t.Fatalf("fence %d: the stale activation did not give way to a new one", fence)
	}

	// Both nodes hammer the voucher; activations keep superseding each
	// other. Users retry UNAVAILABLE; the sale must still be exact.
	var okUsers sync.Map
	var ok atomic.Int64
	ok.Store(3)
	var wg sync.WaitGroup
	for u := int64(10); u < 10+4*stock; u++ {
		wg.Go(func() {
			r := a
			if u%2 == 0 {
				r = b
			}
			for {
				res := r.Grab(context.Background(), domain.GrabRequest{VoucherID: id, UserID: u})
				switch res.Code {
				case domain.SeckillUnavailable:
					time.Sleep(time.Millisecond)
					continue
				case domain.SeckillOK:
					ok.Add(1)
					if _, dup := okUsers.LoadOrStore(u, true); dup {
						t.Errorf("user %d got two orders", u)
					}
				}
				return
			}
		})
	}
	wg.Wait()
	if ok.Load() != stock {
		t.Fatalf("%d OK for a stock of %d", ok.Load(), stock)
	}
	if left, _ := e.rdb.Get(ctx, "{v"+strconv.FormatInt(id, 10)+"}:stock").Int(); left != 0 {
		t.Fatalf("redis stock %d, want 0", left)
	}
}

func TestRedisDownAnswersUnavailableInBoundedTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 100, 1)
	proxy := testenv.MustProxy(t, e.redis.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	r := actors.NewRouter(persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, e.db), e.catalog, quiet,
		actors.Options{CallTimeout: 300 * time.Millisecond, GrabTimeout: 2 * time.Second})
	t.Cleanup(r.Stop)
	if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 1}).Code; c != domain.SeckillOK {
		t.Fatalf("grab with redis up: %s", c)
	}
	proxy.Down()
	start := time.Now()
	if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 2}).Code; c != domain.SeckillUnavailable {
		t.Fatalf("grab with redis down: %s", c)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("answer took %s", d)
	}
	proxy.Up()
	testenv.WaitFor(t, "grabs to recover after redis came back", func() bool {
		return r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 3}).Code == domain.SeckillOK
	})
}

// Redis restarts empty in the middle of a sale (stock 10, one per user;
// four orders sold and persisted). The actors must notice, the voucher
// must be reloaded from the database, and the sale go on from there:
// exactly the six units left sell, the four buyers are told
// LIMIT_REACHED, and the database ends with ten orders, one per user.
func TestRedisLosingItsDataReactivatesTheVoucher(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 10, 1)
	r := e.router(t, nil, actors.Options{})
	w := e.writer(t)
	follow(t, r, e.rdb)
	mustSell(t, r, id, 1, 2, 3, 4)
	testenv.Drained(t, w, 30*time.Second)
	e.redis.Restart() // empty: the voucher is gone from Redis

	// Grabs until the reload sells (it holds its sales for a moment).
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 1}).Code
		if c == domain.SeckillLimitReached {
			break
		}
		if c == domain.SeckillOK || c == domain.SeckillNotFound || time.Now().After(deadline) {
			t.Fatalf("after the restart, user 1 who holds an order: %s", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	answers := map[domain.SeckillCode]int{}
	for u := int64(1); u <= 20; u++ {
		answers[r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: u}).Code]++
	}
	want := map[domain.SeckillCode]int{domain.SeckillLimitReached: 4, domain.SeckillOK: 6, domain.SeckillSoldOut: 10}
	if !maps.Equal(answers, want) {
		t.Fatalf("after the reload: %v, want %v", answers, want)
	}
	testenv.Drained(t, w, 30*time.Second)
	var perUser []int
	err := e.db.NewSelect().Table("tb_voucher_order").ColumnExpr("count(*)").Where("voucher_id = ?", id).
		Group("user_id").Scan(t.Context(), &perUser)
	if err != nil || len(perUser) != 10 || slices.Max(perUser) != 1 {
		t.Fatalf("orders per user in the database: %v (%v), want 10 users with one each", perUser, err)
	}
}

// TestRedisLosingTheVoucherButNotItsFenceReactivatesIt: the voucher's
// keys go (evicted, say) but its fencing token stays, so the next script
// call passes the fence check and itself reports the voucher missing. Its
// grabs must be re-routed to a new activation that reloads the voucher
// from the database, never answered NOT_FOUND.
func TestRedisLosingTheVoucherButNotItsFenceReactivatesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 10, 1)
	r := e.router(t, nil, actors.Options{})
	w := e.writer(t)
	mustSell(t, r, id, 1, 2, 3, 4)
	testenv.Drained(t, w, 30*time.Second)
	keys, err := e.rdb.Keys(t.Context(), "{v"+strconv.FormatInt(id, 10)+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.Contains(k, ":fence") {
			if err := e.rdb.Del(t.Context(), k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for u := int64(5); ; {
		c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: u}).Code
		if c == domain.SeckillOK {
			break
		}
		if c != domain.SeckillUnavailable || time.Now().After(deadline) { // the reload holds its sales a moment
			t.Fatalf("after the loss, user %d of a voucher with 6 units left: %s", u, c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 1}).Code; c != domain.SeckillLimitReached {
		t.Fatalf("after the reload, user 1 who holds an order: %s", c)
	}
}

func TestUnknownVoucherIDsLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router(t, nil, actors.Options{})
	before, _ := e.rdb.DBSize(t.Context()).Result()
	for id := int64(1_000_000); id < 1_000_100; id++ {
		if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 1}).Code; c != domain.SeckillNotFound {
			t.Fatalf("voucher %d: %s", id, c)
		}
	}
	if after, _ := e.rdb.DBSize(t.Context()).Result(); after != before {
		t.Fatalf("grabs of unknown ids added %d redis keys", after-before)
	}
}

// gate holds a test store's batches in flight: each batch reports itself
// on entered (if not nil, without blocking), waits until release is
// opened (if not nil), then takes delay, ignoring the context like a reply
// that arrives late.
type gate struct {
	entered chan struct{}
	release chan struct{}
	delay   time.Duration
	opened  sync.Once
}

func (g *gate) hold() {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	if g.release != nil {
		<-g.release
	}
	time.Sleep(g.delay)
}

// open lets held batches go on; it may be called more than once.
func (g *gate) open() { g.opened.Do(func() { close(g.release) }) }

// slowStore sells everything; it stands in for Redis only to hold a batch
// in flight.
type slowStore struct{ gate }

func liveState() domain.VoucherState {
	return domain.VoucherState{Found: true, Status: domain.StatusActive, Begin: time.Now().Add(-time.Hour), End: time.Now().Add(time.Hour), Limit: 1, Remaining: 10}
}

func (*slowStore) Claim(context.Context, int64, int) (int64, domain.VoucherState, error) {
	return 1, liveState(), nil
}
func (*slowStore) Refence(context.Context, int64, int, int64) (int64, domain.VoucherState, bool, error) {
	return 2, liveState(), false, nil
}
func (*slowStore) State(context.Context, int64) (domain.VoucherState, error) {
	return liveState(), nil
}
func (s *slowStore) Grab(_ context.Context, _ int64, _ int, _ int64, g []domain.Grab) (domain.BatchOutcome, error) {
	s.hold()
	out := domain.BatchOutcome{State: liveState()}
	for _, x := range g {
		out.Results = append(out.Results, domain.GrabResult{Code: domain.SeckillOK, OrderID: x.OrderID})
	}
	return out, nil
}

type seqIDs struct{ n atomic.Int64 }

func (s *seqIDs) Take(_ context.Context, n int) ([]int64, error) {
	out := make([]int64, n)
	for i := range out {
		out[i] = s.n.Add(1)
	}
	return out, nil
}

func TestCloseAnswersTheBatchInFlight(t *testing.T) {
	t.Parallel()
	// The store holds the batch for a second after it arrives: Close starts
	// well within that, and waits (up to GrabTimeout) for the answer.
	st := &slowStore{gate{entered: make(chan struct{}, 1), delay: time.Second}}
	r := actors.NewRouter(st, &seqIDs{}, nil, quiet, actors.Options{GrabTimeout: 5 * time.Second})
	res := make(chan domain.GrabResult, 1)
	go func() { res <- r.Grab(context.Background(), domain.GrabRequest{VoucherID: 1, UserID: 1}) }()
	<-st.entered // the batch is in the store now
	r.Stop()
	if got := <-res; got.Code != domain.SeckillOK {
		t.Fatalf("the store sold the grab but the caller got %s", got.Code)
	}
	if got := r.Grab(context.Background(), domain.GrabRequest{VoucherID: 1, UserID: 2}); got.Code != domain.SeckillUnavailable {
		t.Fatalf("a grab after Close: %s", got.Code)
	}
}

// TestRedisKilledMidSaleLosesAndOversellsNothing kills a durable Redis
// (append-only file, fsync always, as production runs it) with SIGKILL in
// the middle of a sale and restarts it: callers see UNAVAILABLE meanwhile
// and retry; in the end exactly the stock is sold, to distinct users, and
// every OK'd order is in the database.
func TestRedisKilledMidSaleLosesAndOversellsNothing(t *testing.T) {
	t.Parallel()
	e := &env{db: testenv.MustPostgres(t), redis: testenv.MustDurableRedis(t)}
	e.rdb = e.redis.Client()
	e.catalog = catalog.New(persistence.NewVouchers(e.db), persistence.NewStock(e.rdb), quiet)
	const stock = 400
	id := e.live(t, stock, 1)
	// A batch whose reply the kill lost must keep retrying (with the same
	// request ids, so the script answers what it did) until Redis is back,
	// however long the restart takes: answered UNAVAILABLE, its users would
	// retry with new request ids and be told LIMIT_REACHED for units they
	// bought.
	r := e.router(t, nil, actors.Options{CallTimeout: 300 * time.Millisecond, Attempts: 40, GrabTimeout: 10 * time.Second})
	w := e.writer(t)

	var (
		mu       sync.Mutex
		okOrders = map[int64]int64{}
		wg       sync.WaitGroup
	)
	// After the restart Redis answers UNAVAILABLE until the voucher is
	// rebuilt from the database and its reload hold is over (a restart
	// changes the server's run id: see grab.lua).
	giveUp := time.Now().Add(30*time.Second + persistence.ReloadHoldDefault)
	for u := int64(1); u <= 3*stock; u++ {
		wg.Go(func() {
			for time.Now().Before(giveUp) {
				res := r.Grab(context.Background(), domain.GrabRequest{VoucherID: id, UserID: u})
				switch res.Code {
				case domain.SeckillUnavailable:
					time.Sleep(20 * time.Millisecond)
					continue
				case domain.SeckillOK:
					mu.Lock()
					okOrders[res.OrderID] = u
					mu.Unlock()
				case domain.SeckillSoldOut:
				default:
					t.Errorf("user %d: %s", u, res.Code)
				}
				return
			}
			t.Errorf("user %d never got an answer", u)
		})
	}
	for {
		mu.Lock()
		sold := len(okOrders)
		mu.Unlock()
		if sold >= stock/3 {
			e.redis.Restart() // SIGKILL and start again, mid-sale
			t.Logf("redis killed after %d of %d units were sold", sold, stock)
			break
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if len(okOrders) != stock {
		t.Fatalf("%d OK for a stock of %d", len(okOrders), stock)
	}
	testenv.Drained(t, w, 30*time.Second)
	var ids []int64
	if err := e.db.NewSelect().Table("tb_voucher_order").Column("id").Where("voucher_id = ?", id).Scan(t.Context(), &ids); err != nil {
		t.Fatal(err)
	}
	if len(ids) != stock {
		t.Fatalf("%d orders in the database, want %d", len(ids), stock)
	}
	for _, oid := range ids {
		if _, ok := okOrders[oid]; !ok {
			t.Fatalf("order %d in the database was never answered OK", oid)
		}
	}
}

func TestIdleActorsArePassivated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 10, 1)
	// IdleTimeout is long against one grab, so the actor is still active
	// right after it, and short against the wait below.
	r := e.router(t, nil, actors.Options{IdleTimeout: time.Second})
	if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 1}).Code; c != domain.SeckillOK || !r.Active(id) {
		t.Fatalf("grab %s, active %v", c, r.Active(id))
	}
	testenv.WaitFor(t, "the idle actor to passivate", func() bool { return !r.Active(id) })
	// A new activation picks up where the old one left off.
	if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 1}).Code; c != domain.SeckillLimitReached {
		t.Fatalf("after passivation: %s", c)
	}
}

// TestPostgresOutageMidSale cuts the database off in the middle of a sale:
// grabs keep being answered from Redis, orders wait in the order log, and
// once the database is back every OK'd order lands exactly once.
func TestPostgresOutageMidSale(t *testing.T) {
	t.Parallel()
	dbURL := testenv.MustPostgresURL(t)
	direct := testenv.MustOpen(t, dbURL)
	u, _ := url.Parse(dbURL)
	proxy := testenv.MustProxy(t, u.Host)
	u.Host = proxy.Addr()
	viaProxy := testenv.MustOpen(t, u.String())
	e := &env{db: viaProxy, redis: testenv.MustRedis(t)}
	e.rdb = e.redis.Client()
	e.catalog = catalog.New(persistence.NewVouchers(viaProxy), persistence.NewStock(e.rdb), quiet)
	const stock = 300
	id := e.live(t, stock, 1)
	r := e.router(t, nil, actors.Options{})
	w := e.writer(t)

	var mu sync.Mutex
	ok := map[int64]bool{}
	grabRange := func(from, to int64) {
		var wg sync.WaitGroup
		for u := from; u < to; u++ {
			wg.Go(func() {
				res := r.Grab(context.Background(), domain.GrabRequest{VoucherID: id, UserID: u})
				switch res.Code {
				case domain.SeckillOK:
					mu.Lock()
					ok[res.OrderID] = true
					mu.Unlock()
				case domain.SeckillSoldOut:
				default:
					t.Errorf("user %d: %s", u, res.Code)
				}
			})
		}
		wg.Wait()
	}
	grabRange(1, 100)
	proxy.Down()
	// The database stays unreachable for several seconds while the sale
	// goes on and sells out.
	outage := time.Now()
	grabRange(100, 500)
	time.Sleep(3*time.Second - time.Since(outage))
	if inflight, _ := persistence.InFlight(t.Context(), e.rdb, id); inflight == 0 {
		t.Fatal("no orders waiting in the log during the outage")
	}
	proxy.Up()
	if len(ok) != stock {
		t.Fatalf("%d OK for a stock of %d", len(ok), stock)
	}
	testenv.Drained(t, w, 30*time.Second)
	var ids []int64
	if err := direct.NewSelect().Table("tb_voucher_order").Column("id").Where("voucher_id = ?", id).Scan(t.Context(), &ids); err != nil {
		t.Fatal(err)
	}
	if len(ids) != stock {
		t.Fatalf("%d orders in the database, want %d", len(ids), stock)
	}
	for _, oid := range ids {
		if !ok[oid] {
			t.Fatalf("order %d was never answered OK", oid)
		}
	}
}

func TestSoldOutLiftsWhenStockComesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 1, 1)
	r := e.router(t, nil, actors.Options{})
	stock := persistence.NewStock(e.rdb)
	follow(t, r, e.rdb)
	grab := func(u int64) domain.SeckillCode {
		return r.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: u}).Code
	}
	if c := grab(1); c != domain.SeckillOK {
		t.Fatalf("first grab %s", c)
	}
	if c := grab(2); c != domain.SeckillSoldOut {
		t.Fatalf("second grab %s", c)
	}
	// A unit comes back (as a cancellation will return it) and is announced.
	if err := e.rdb.Incr(t.Context(), "{v"+strconv.FormatInt(id, 10)+"}:stock").Err(); err != nil {
		t.Fatal(err)
	}
	if err := stock.Announce(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the actor to stop answering SOLD_OUT from memory", func() bool { return grab(3) == domain.SeckillOK })
}

func TestAFullQueueAnswersUnavailableAtOnce(t *testing.T) {
	t.Parallel()
	const grabs, bound = 40, 5
	// The store holds the first batch until the gate opens, so nothing is
	// answered from the queue meanwhile: exactly bound grabs are queued
	// (one of them in flight) and every other one must be shed without
	// waiting for the queue to move.
	st := &slowStore{gate{release: make(chan struct{})}}
	r := actors.NewRouter(st, &seqIDs{}, nil, quiet, actors.Options{QueueBound: bound, BatchSize: 1, GrabTimeout: time.Minute})
	t.Cleanup(r.Stop)
	t.Cleanup(st.open) // runs before r.Close, even when the test fails
	type answer struct {
		user int64
		code domain.SeckillCode
	}
	answers := make(chan answer, grabs)
	for u := int64(1); u <= grabs; u++ {
		go func() {
			answers <- answer{u, r.Grab(context.Background(), domain.GrabRequest{VoucherID: 1, UserID: u}).Code}
		}()
	}
	// No clock decides the outcome; the timer only turns a shed grab that
	// waits for the gate into a failure instead of a hang. It ends well
	// before GrabTimeout, so a grab that queued and timed out cannot pass
	// for a shed one.
	stuck := time.After(30 * time.Second)
	for range grabs - bound {
		select {
		case a := <-answers:
			if a.code != domain.SeckillUnavailable {
				t.Fatalf("user %d: %s while the store held the queue, want %s", a.user, a.code, domain.SeckillUnavailable)
			}
		case <-stuck:
			t.Fatal("grabs over the queue bound waited for the queue to move")
		}
	}
	st.open()
	for range bound {
		if a := <-answers; a.code != domain.SeckillOK {
			t.Errorf("user %d: %s, want %s for a queued grab", a.user, a.code, domain.SeckillOK)
		}
	}
}
