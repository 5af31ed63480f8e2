//go:build !race

package actors_test

// Cluster members in one process, without the race detector: protoactor-go's
// remote.Start sets grpc's process-wide logger (grpclog.SetLoggerV2, remote/
// server.go) on every start while another member's gRPC server and
// connections read it, a data race inside the library whenever two members
// share a process. Our own packages are race-checked by every other test
// (scripts/test.sh runs this file in a step of its own without -race); the
// service itself runs one member per process.

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// These tests run several cluster members in one process: each has its
// own actor system, remoting on its own loopback port and its own Redis
// clients, and they find each other through protoactor's in-memory test
// provider. Every grab between members crosses the network as protobuf
// (GrabRequest, GrabReply), as it would between processes.

// clusterName is a fresh cluster for each test (the in-memory provider is
// per agent anyway; the name shows in logs).
func clusterName() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// member starts a cluster member on the env's Redis and database; hooks
// see its Redis commands.
func (e *env) member(tb testing.TB, agent *test.InMemAgent, name string, opts actors.Options, hooks ...redis.Hook) *actors.Router {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	opts.CallTimeout = cmp.Or(opts.CallTimeout, 2*time.Second)
	opts.BatchTimeout = cmp.Or(opts.BatchTimeout, 5*time.Second)
	r, err := actors.NewClusteredRouter(persistence.NewGrabs(rdb), testenv.MustOrderIDs(tb, e.db), e.catalog, quiet, opts,
		actors.ClusterOptions{Name: name, Provider: test.NewTestProvider(agent), Host: "127.0.0.1"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Stop(); _ = rdb.Close() })
	_ = r.Start(tb.Context())
	r.Cluster().Join()
	return r
}

// waitMembers waits until every router sees n members.
func waitMembers(tb testing.TB, n int, rs ...*actors.Router) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, r := range rs {
		for len(r.Cluster().Members()) != n {
			if time.Now().After(deadline) {
				tb.Fatalf("member %s sees %v, want %d members", r.Cluster().Address(), r.Cluster().Members(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// sale is the outcome of grabs fired at members.
type sale struct {
	mu     sync.Mutex
	ok     map[int64]int64 // order id -> user
	byUser map[int64]int
	codes  map[domain.SeckillCode]int
}

func newSale() *sale {
	return &sale{ok: map[int64]int64{}, byUser: map[int64]int{}, codes: map[domain.SeckillCode]int{}}
}

func (s *sale) record(tb testing.TB, user int64, res domain.GrabResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[res.Code]++
	if res.Code != domain.SeckillOK {
		return
	}
	if prev, dup := s.ok[res.OrderID]; dup && prev != user {
		tb.Errorf("order %d answered to users %d and %d", res.OrderID, prev, user)
	}
	if _, dup := s.ok[res.OrderID]; !dup {
		s.byUser[user]++
	}
	s.ok[res.OrderID] = user
}

// fire grabs for users [from, to) attempts times each, user u through
// pick(u), with workers goroutines.
func (s *sale) fire(tb testing.TB, voucher int64, from, to int64, attempts, workers int, pick func(u int64) *actors.Router) {
	var next atomic.Int64
	next.Store(from * int64(attempts))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= to*int64(attempts) {
					return
				}
				u := i / int64(attempts)
				s.record(tb, u, pick(u).Grab(context.Background(), domain.GrabRequest{VoucherID: voucher, UserID: u}))
			}
		})
	}
	wg.Wait()
}

// check asserts the invariants after a sale of stock units at limit one:
// exactly stock OK'd orders to distinct users, each in the database once.
func (s *sale) check(tb testing.TB, e *env, voucher int64, stock int) {
	tb.Helper()
	if len(s.ok) != stock {
		tb.Errorf("%d distinct OK'd orders, want exactly %d (codes %v)", len(s.ok), stock, s.codes)
	}
	for u, n := range s.byUser {
		if n > 1 {
			tb.Errorf("user %d got %d orders, limit 1", u, n)
		}
	}
	var rows []struct {
		ID     int64 `bun:"id"`
		UserID int64 `bun:"user_id"`
	}
	if err := e.db.NewSelect().Table("tb_voucher_order").Column("id", "user_id").Where("voucher_id = ?", voucher).Scan(context.Background(), &rows); err != nil {
		tb.Fatal(err)
	}
	if len(rows) != stock {
		tb.Errorf("%d orders in the database, want %d", len(rows), stock)
	}
	for _, r := range rows {
		if u, ok := s.ok[r.ID]; !ok || u != r.UserID {
			tb.Errorf("database order %d (user %d) was not OK'd to that user", r.ID, r.UserID)
		}
	}
	if left, err := e.rdb.Get(context.Background(), fmt.Sprintf("{v%d}:stock", voucher)).Int(); err != nil || left != 0 {
		tb.Errorf("redis stock %d (%v), want 0", left, err)
	}
}

// fences reads each segment's fencing token: how often it was claimed.
func fences(tb testing.TB, rdb *redis.Client, voucher int64, segs int) []int {
	out := make([]int, segs)
	for s := range segs {
		key := fmt.Sprintf("{v%d}:fence", voucher)
		if s > 0 {
			key += fmt.Sprintf(":%d", s)
		}
		out[s], _ = rdb.Get(context.Background(), key).Int()
	}
	return out
}

// Three members sell one 4-segment voucher: grabs enter at every member,
// reach the member hosting the user's segment, and the sale is exact.
// Each segment's fencing token is taken a handful of times at most (one
// owner per segment, not one activation per member and voucher).
func TestThreeMembersSellExactlyWithOneOwnerPerSegment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const stock, segs = 600, 4
	id := testenv.MustVoucher(t, e.db, e.rdb, testenv.VoucherSpec{Stock: stock, Segments: segs}).ID
	agent, name := test.NewInMemAgent(), clusterName()
	lk := newLeases(3*time.Second, testenv.MustRedis(t))
	var ms []*actors.Router
	for range 3 {
		ms = append(ms, e.member(t, agent, name, actors.Options{Leases: lk}))
	}
	waitMembers(t, 3, ms...)
	w := e.writer(t)
	s := newSale()
	s.fire(t, id, 1, 6001, 2, 48, func(u int64) *actors.Router { return ms[u%3] })
	testenv.Drained(t, w, 30*time.Second)
	s.check(t, e, id, stock)

	hosts := map[string]int{}
	for i, m := range ms {
		for _, h := range actors.Hosted(m) {
			if h[0] == id {
				hosts[fmt.Sprint(h[1])]++
				t.Logf("member %d hosts segment %d", i, h[1])
			}
		}
	}
	if len(hosts) != segs {
		t.Errorf("segments hosted %v, want all %d", hosts, segs)
	}
	for seg, n := range hosts {
		if n != 1 {
			t.Errorf("segment %s hosted by %d members", seg, n)
		}
	}
	for seg, f := range fences(t, e.rdb, id, segs) {
		if f < 1 || f > 3 {
			t.Errorf("segment %d's fencing token was taken %d times, want 1..3", seg, f)
		}
	}
}

// Members join and leave in the middle of a sale: segments move to their
// new hosts (the old activation stops and lets its lease go), and the sale
// stays exact.
//
// Which segments the joining member takes depends on its port (placement
// hashes the address), so the test asks the placement which segments are
// the newcomer's and checks that it hosts each of them. With 8 segments a
// newcomer among three members owned none in (2/3)^8 = 3.9 % of runs, and
// the test failed then; 32 segments make that 2·10⁻⁶, and the check stays
// exact whatever the ports.
func TestMembersJoiningAndLeavingMidSaleKeepTheSaleExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const stock, segs = 500, 32
	id := testenv.MustVoucher(t, e.db, e.rdb, testenv.VoucherSpec{Stock: stock, Segments: segs}).ID
	agent, name := test.NewInMemAgent(), clusterName()
	lk := newLeases(time.Second, testenv.MustRedis(t))
	a := e.member(t, agent, name, actors.Options{Leases: lk})
	b := e.member(t, agent, name, actors.Options{Leases: lk})
	waitMembers(t, 2, a, b)
	w := e.writer(t)
	s := newSale()
	entry := []*actors.Router{a, b}
	s.fire(t, id, 1, 301, 1, 16, func(u int64) *actors.Router { return entry[u%2] })

	c := e.member(t, agent, name, actors.Options{Leases: lk}) // joins mid-sale
	waitMembers(t, 3, a, b, c)
	entry = []*actors.Router{a, b, c}
	s.fire(t, id, 301, 601, 1, 16, func(u int64) *actors.Router { return entry[u%3] })
	checkNewcomerHostsItsSegments(t, id, segs, 301, 601, c, a, b)

	b.Stop() // leaves mid-sale
	waitMembers(t, 2, a, c)
	entry = []*actors.Router{a, c}
	s.fire(t, id, 601, 3001, 2, 16, func(u int64) *actors.Router { return entry[u%2] })
	testenv.Drained(t, w, 30*time.Second)
	s.check(t, e, id, stock)
	if s.codes[domain.SeckillUnavailable] > 100 {
		t.Errorf("%d UNAVAILABLE: segments were not served elsewhere in time", s.codes[domain.SeckillUnavailable])
	}
}

// checkNewcomerHostsItsSegments checks that newcomer runs an activation
// of every segment that the placement over all members gives it and that
// users [from, to) grabbed from, and that the placement gave it at least one.
func checkNewcomerHostsItsSegments(tb testing.TB, voucher int64, segs int, from, to int64, newcomer *actors.Router, others ...*actors.Router) {
	tb.Helper()
	addrs := []string{newcomer.Cluster().Address()}
	for _, o := range others {
		addrs = append(addrs, o.Cluster().Address())
	}
	grabbed := map[int]bool{}
	for u := from; u < to; u++ {
		grabbed[actors.SegmentOf(u, segs)] = true
	}
	hosted := map[int64]bool{}
	for _, h := range actors.Hosted(newcomer) {
		if h[0] == voucher {
			hosted[h[1]] = true
		}
	}
	mine := 0
	for seg := range segs {
		if actors.Owner(addrs, voucher, seg) != addrs[0] || !grabbed[seg] {
			continue
		}
		mine++
		if !hosted[int64(seg)] {
			tb.Errorf("segment %d is the joined member's, but it does not host it (hosts %v)", seg, hosted)
		}
	}
	if mine == 0 {
		tb.Fatalf("the placement gave the joined member none of %d segments (members %v): nothing moved", segs, addrs)
	}
}

// Two members host one segment at once (the lease lapsed unnoticed and
// the other member took it): the activation whose fencing token is older
// is refused inside the script and stops itself, and the sale stays exact.
func TestDuplicateActivationIsFencedOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const stock = 300
	id := e.live(t, stock, 1)
	lockNode := testenv.MustRedis(t)
	lk := newLeases(5*time.Second, lockNode)
	agent, name := test.NewInMemAgent(), clusterName()
	// a waits briefly for a lease: once b holds it, a's new activations
	// are refused (UNAVAILABLE) rather than wait out b's lease.
	a := e.member(t, agent, name, actors.Options{Leases: lk, LeaseWait: 200 * time.Millisecond})
	b := e.member(t, agent, name, actors.Options{Leases: lk})
	waitMembers(t, 2, a, b)
	w := e.writer(t)
	s := newSale()
	s.record(t, 1, actors.GrabOn(a, domain.GrabRequest{VoucherID: id, UserID: 1}, 0)) // a hosts segment 0

	// The lease lapses without a noticing: b takes it and activates too.
	lockNode.Client().Del(context.Background(), fmt.Sprintf("flashsale:lease:seg:{v%d}/0", id))
	s.record(t, 2, actors.GrabOn(b, domain.GrabRequest{VoucherID: id, UserID: 2}, 0))
	if f := fences(t, e.rdb, id, 1)[0]; f != 2 {
		t.Fatalf("fencing token %d after two activations, want 2", f)
	}
	// Both activations sell at once: a's batches carry the older token.
	var wg sync.WaitGroup
	wg.Go(func() {
		for u := int64(10); u < 20; u++ {
			s.record(t, u, actors.GrabOn(a, domain.GrabRequest{VoucherID: id, UserID: u}, 0))
		}
	})
	wg.Go(func() {
		for u := int64(1000); u < 1600; u++ {
			s.record(t, u, actors.GrabOn(b, domain.GrabRequest{VoucherID: id, UserID: u}, 0))
		}
	})
	wg.Wait()
	testenv.Drained(t, w, 30*time.Second)
	s.check(t, e, id, stock)
	if f := fences(t, e.rdb, id, 1)[0]; f != 2 {
		t.Errorf("fencing token %d: an activation without the lease claimed one", f)
	}
	if len(actors.Hosted(a)) != 0 {
		t.Error("the fenced-off activation on the first member still runs")
	}
}

// scriptGate holds one client's script calls (EVALSHA, EVAL) while it is
// shut: a member's batches stay in flight while other members go on. It
// holds a call before it is sent, under the call's own deadline; the
// stalling proxy of testenv holds replies instead, which the client's
// socket read timeout (3 s) turns into lost replies and failed batches
// while a member joins.
type scriptGate struct{ shut atomic.Pointer[chan struct{}] }

func (g *scriptGate) close() { ch := make(chan struct{}); g.shut.Store(&ch) }

func (g *scriptGate) open() {
	if ch := g.shut.Swap(nil); ch != nil {
		close(*ch)
	}
}

func (g *scriptGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			if ch := g.shut.Load(); ch != nil {
				select {
				case <-*ch:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (g *scriptGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A member that joins takes segments from another, whose activation hands
// the grabs it queued, never in a script call, on to the new host: they
// must arrive there as never sent. Marked sent, each makes the new host
// give up its record of the sales (a grab that was in a script call may
// have sold unseen), and its keyed grabs after the sell-out cost a lookup
// in Redis each from then on.
//
// The vouchers are paused, so no grab sells and the new host's claim
// finds no sale (a record starts only then), while keyed grabs still go to
// script calls. Not parallel: it counts a process-wide metric, and the
// parallel tests of this package run only after the serial ones.
func TestMembersChangingHandOnQueuedGrabsAsNeverSent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agent, name := test.NewInMemAgent(), clusterName()
	lk := newLeases(time.Second, testenv.MustRedis(t))
	held := &scriptGate{}
	slow := actors.Options{Leases: lk, CallTimeout: 20 * time.Second, BatchTimeout: 20 * time.Second}
	a := e.member(t, agent, name, slow, held)
	waitMembers(t, 1, a)

	// 24 vouchers, so that the joining member takes some whatever its
	// port: none of 24 stays with a in (1/2)^24 of runs.
	var ids []int64
	for range 24 {
		id := testenv.MustVoucher(t, e.db, e.rdb, testenv.VoucherSpec{Stock: 10}).ID
		if _, err := e.catalog.SetStatus(ctx, id, domain.StatusPaused); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if res := a.Grab(ctx, domain.GrabRequest{VoucherID: id, UserID: 1, RequestID: "k"}); res.Code != domain.SeckillPaused {
			t.Fatalf("voucher %d: first grab %v, want PAUSED", id, res)
		}
	}

	// Each activation on a: one script call held in flight, three grabs
	// queued behind it.
	held.close()
	defer held.open()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[domain.SeckillCode]int{}
	for _, id := range ids {
		for u := int64(2); u <= 5; u++ {
			wg.Go(func() {
				res := a.Grab(ctx, domain.GrabRequest{VoucherID: id, UserID: u, RequestID: "k"})
				mu.Lock()
				codes[res.Code]++
				mu.Unlock()
			})
		}
	}
	testenv.WaitFor(t, "every grab queued at the first member", func() bool {
		for _, id := range ids {
			if actors.Queued(a, id) != 4 {
				return false
			}
		}
		return true
	})

	drops := actors.SaleMemoryDrops()
	b, moved := e.joinAndTake(t, agent, name, lk, a, ids)
	held.open()
	wg.Wait()

	if codes[domain.SeckillPaused] != 4*len(ids) {
		t.Errorf("answers %v, want PAUSED for all %d grabs", codes, 4*len(ids))
	}
	onB := map[int64]bool{}
	for _, h := range actors.Hosted(b) {
		onB[h[0]] = true
	}
	for _, id := range moved {
		if !onB[id] {
			t.Errorf("voucher %d moved to the joining member, but no grab of it reached there", id)
		}
	}
	if n := actors.SaleMemoryDrops() - drops; n != 0 {
		t.Errorf("%v records of the sales given up: grabs handed on arrived marked as sent", n)
	}
}

// joinAndTake starts a member that joins a's cluster and waits until a
// has retired its activations of the vouchers among ids (one segment
// each) that the joiner now hosts, which it returns; at least one.
func (e *env) joinAndTake(tb testing.TB, agent *test.InMemAgent, name string, lk leases, a *actors.Router, ids []int64) (*actors.Router, []int64) {
	tb.Helper()
	b := e.member(tb, agent, name, actors.Options{Leases: lk})
	waitMembers(tb, 2, a, b)
	members := []string{a.Cluster().Address(), b.Cluster().Address()}
	var moved []int64
	for _, id := range ids {
		if actors.Owner(members, id, 0) == members[1] {
			moved = append(moved, id)
		}
	}
	if len(moved) == 0 {
		tb.Fatalf("the joining member took none of %d vouchers (members %v)", len(ids), members)
	}
	testenv.WaitFor(tb, "the first member retired the moved activations", func() bool {
		for _, h := range actors.Hosted(a) {
			if slices.Contains(moved, h[0]) {
				return false
			}
		}
		return true
	})
	return b, moved
}

// A caller that gave up on its grab was told UNAVAILABLE: the grab must
// never sell afterwards, also when the activation holding it hands it on
// to the member that took its segment (no phantom order). Grabs queue
// behind a script call held on the first member, their callers give up,
// a member joins and takes the segments, and the held calls go on.
func TestMembersChangingNeverHandOnAGrabItsCallerGaveUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agent, name := test.NewInMemAgent(), clusterName()
	lk := newLeases(time.Second, testenv.MustRedis(t))
	held := &scriptGate{}
	slow := actors.Options{Leases: lk, CallTimeout: 20 * time.Second, BatchTimeout: 20 * time.Second, GrabTimeout: 20 * time.Second}
	a := e.member(t, agent, name, slow, held)
	waitMembers(t, 1, a)
	w := e.writer(t)

	// 24 vouchers, so that the joining member takes some whatever its
	// port; user 1 buys one unit of each on a (its activation starts).
	var ids []int64
	for range 24 {
		id := e.live(t, 10, 1)
		ids = append(ids, id)
		if res := a.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 1}); res.Code != domain.SeckillOK {
			t.Fatalf("voucher %d: user 1 got %s", id, res.Code)
		}
	}

	// Per voucher: user 2's grab in a held script call, users 3-5 queued
	// behind it until their callers give up.
	held.close()
	defer held.open()
	var inFlight sync.WaitGroup
	second := map[int64]*domain.GrabResult{}
	for _, id := range ids {
		res := &domain.GrabResult{}
		second[id] = res
		inFlight.Go(func() { *res = a.Grab(context.Background(), domain.GrabRequest{VoucherID: id, UserID: 2}) })
	}
	testenv.WaitFor(t, "every voucher's second grab in a held call", func() bool {
		for _, id := range ids {
			if actors.Queued(a, id) != 1 {
				return false
			}
		}
		return true
	})
	giveUp, cancel := context.WithCancel(context.Background())
	var gaveUp sync.WaitGroup
	var told atomic.Int32
	for _, id := range ids {
		for u := int64(3); u <= 5; u++ {
			gaveUp.Go(func() {
				if res := a.Grab(giveUp, domain.GrabRequest{VoucherID: id, UserID: u}); res.Code == domain.SeckillUnavailable {
					told.Add(1)
				}
			})
		}
	}
	testenv.WaitFor(t, "users 3-5 queued behind the held calls", func() bool {
		for _, id := range ids {
			if actors.Queued(a, id) != 4 {
				return false
			}
		}
		return true
	})
	cancel()
	gaveUp.Wait()
	if n := told.Load(); n != int32(3*len(ids)) {
		t.Fatalf("%d of %d callers who gave up were told UNAVAILABLE", n, 3*len(ids))
	}

	_, moved := e.joinAndTake(t, agent, name, lk, a, ids)
	held.open()
	inFlight.Wait()
	testenv.Drained(t, w, 30*time.Second)
	for _, id := range ids {
		if res := second[id]; res.Code != domain.SeckillOK {
			t.Errorf("voucher %d: user 2's grab in the held call got %s, want OK", id, res.Code)
		}
		for u := int64(3); u <= 5; u++ {
			if orders := e.ordersOf(t, id, u); len(orders) != 0 {
				t.Errorf("voucher %d (moved: %v): user %d gave up, was told UNAVAILABLE, and holds orders %v", id, slices.Contains(moved, id), u, orders)
			}
		}
	}
}
