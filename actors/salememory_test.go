package actors_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// scriptGrabs is a go-redis hook that counts the grabs sent to the grab
// script (EVALSHA/EVAL with its seven keys: fence, voucher id, then three
// arguments per grab) and the script calls that carried none.
type scriptGrabs struct{ grabs, empty atomic.Int64 }

func (s *scriptGrabs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptGrabs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.count(cmd)
		return next(ctx, cmd)
	}
}

func (s *scriptGrabs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			s.count(c)
		}
		return next(ctx, cmds)
	}
}

func (s *scriptGrabs) count(cmd redis.Cmder) {
	args := cmd.Args()
	if name := cmd.Name(); (name != "evalsha" && name != "eval") || len(args) < 3 || args[2] != 7 {
		return
	}
	n := (len(args) - 3 - 7 - 2) / 3
	s.grabs.Add(int64(n))
	if n == 0 {
		s.empty.Add(1)
	}
}

func keyedGrab(r *actors.Router, voucher, user int64, key string) domain.GrabResult {
	return r.Grab(context.Background(), domain.GrabRequest{VoucherID: voucher, UserID: user, RequestID: key})
}

// After the sell-out, keyed grabs (first attempts and retries of sales)
// are answered from the activation's record of the sales, proven whole by
// one script call per batch that carries no grab: no key is looked up in
// Redis one by one, and every answer is the script's.
func TestKeyedGrabsAfterTheSellOutAreAnsweredFromTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 3, 1)
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var sg scriptGrabs
	rdb.AddHook(&sg)
	r := actors.NewRouter(persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, e.db), e.catalog, quiet, actors.Options{CallTimeout: 2 * time.Second, BatchTimeout: 5 * time.Second})
	t.Cleanup(r.Stop)

	orders := map[int64]int64{}
	for u := int64(1); u <= 3; u++ {
		res := keyedGrab(r, id, u, "k"+strconv.FormatInt(u, 10))
		if res.Code != domain.SeckillOK {
			t.Fatalf("user %d: %s, want OK", u, res.Code)
		}
		orders[u] = res.OrderID
	}
	if c := keyedGrab(r, id, 4, "k4").Code; c != domain.SeckillSoldOut { // the activation learns the sell-out
		t.Fatalf("user 4: %s, want SOLD_OUT", c)
	}
	before := sg.grabs.Load()

	var wg sync.WaitGroup
	for u := int64(100); u < 400; u++ {
		wg.Go(func() {
			if c := keyedGrab(r, id, u, "k").Code; c != domain.SeckillSoldOut {
				t.Errorf("user %d: %s, want SOLD_OUT", u, c)
			}
		})
	}
	for u := int64(1); u <= 3; u++ {
		wg.Go(func() {
			res := keyedGrab(r, id, u, "k"+strconv.FormatInt(u, 10))
			if res.Code != domain.SeckillOK || res.OrderID != orders[u] {
				t.Errorf("user %d's retry: %s (order %d), want OK with order %d", u, res.Code, res.OrderID, orders[u])
			}
		})
	}
	wg.Wait()
	if n := sg.grabs.Load() - before; n != 0 {
		t.Fatalf("%d keyed grabs after the sell-out went to the script as grabs, want 0", n)
	}
	if sg.empty.Load() == 0 {
		t.Fatal("no script call proved the record")
	}
	// A buyer with a new key is at the limit: the record never says so
	// itself (a cancellation may have given the slot back), the script does.
	if c := keyedGrab(r, id, 2, "another").Code; c != domain.SeckillLimitReached {
		t.Fatalf("buyer 2 with a new key: %s, want LIMIT_REACHED", c)
	}
}

// A sale the record never saw (another activation with the same fence,
// as after Redis lost the fence key) makes the next call's tally disagree:
// the record is dropped, and the buyer's retry gets the order, never the
// SOLD_OUT the record would say.
func TestASaleTheRecordNeverSawIsNeverAnsweredSoldOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 2, 1)
	r := e.router(t, nil, actors.Options{})
	if c := keyedGrab(r, id, 1, "k1").Code; c != domain.SeckillOK {
		t.Fatalf("user 1: %s, want OK", c)
	}
	fence, err := e.rdb.Get(t.Context(), "{v"+strconv.FormatInt(id, 10)+"}:fence").Int64()
	if err != nil {
		t.Fatal(err)
	}
	oid := int64(9_000_000_000_001)
	out, err := persistence.NewGrabs(e.rdb).Grab(t.Context(), id, 0, fence, []domain.Grab{{RequestID: "u2:k2", UserID: 2, OrderID: oid}})
	if err != nil || out.Stale || out.Results[0].Code != domain.SeckillOK {
		t.Fatalf("the sale behind the activation's back: %+v, %v", out, err)
	}
	if c := keyedGrab(r, id, 3, "k3").Code; c != domain.SeckillSoldOut { // the activation learns the sell-out
		t.Fatalf("user 3: %s, want SOLD_OUT", c)
	}
	res := keyedGrab(r, id, 2, "k2")
	if res.Code != domain.SeckillOK || res.OrderID != oid {
		t.Fatalf("user 2's retry: %s (order %d), want OK with order %d", res.Code, res.OrderID, oid)
	}
}

// A keyed grab whose script call sold and lost its reply is answered
// UNAVAILABLE; once the activation knows the voucher sold out, the
// client's retry with the same key must get that order, not SOLD_OUT.
func TestALostReplyIsNeverAnsweredSoldOutFromTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.stallingNode(t, actors.Options{CallTimeout: 200 * time.Millisecond, Attempts: 1, GrabTimeout: 5 * time.Second})
	id := e.live(t, 2, 1)
	mustSell(t, a.Router, id, 10) // the activation holds its fence and its record; one unit is left
	a.grabs.Proxy.Stall()
	res := make(chan domain.GrabResult, 1)
	go func() { res <- keyedGrab(a.Router, id, 1, "k1") }()
	e.waitSold(t, id, 2) // the script sold user 1 the last unit
	a.grabs.LostReply(t)
	a.grabs.Proxy.Resume()
	if got := <-res; got.Code != domain.SeckillUnavailable {
		t.Fatalf("the grab whose reply was lost: %s, want UNAVAILABLE", got.Code)
	}
	if c := a.Grab(t.Context(), domain.GrabRequest{VoucherID: id, UserID: 2}).Code; c != domain.SeckillSoldOut {
		t.Fatalf("user 2: %s, want SOLD_OUT", c) // the activation learns the sell-out
	}
	got := keyedGrab(a.Router, id, 1, "k1")
	if got.Code != domain.SeckillOK || got.OrderID == 0 {
		t.Fatalf("user 1's retry: %s (order %d), want OK with the order that sold", got.Code, got.OrderID)
	}
}

// Redis goes back in time without a restart (a restart changes its run
// id, and the grab script then refuses to sell until the load is rebuilt
// from the database): it reloads a snapshot taken before activation A
// claimed, so it forgets A's sales and its fence but keeps
// the load. Activation B (another node during a membership change)
// claims the same fence number and sells as many units as A's record
// holds. A's next check passes the fence and the count; only B's claim
// nonce tells A that its record no longer proves anything. Every retry
// landing on A must get the script's answer: B's buyer its order, A's
// own buyer no order Redis has forgotten.
func TestARecordOutlivedByAnotherClaimAfterRedisWentBackIsNeverTrusted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 2, 1)
	if err := e.rdb.Save(t.Context()).Err(); err != nil { // the snapshot: no activation yet
		t.Fatal(err)
	}
	a := e.router(t, nil, actors.Options{})
	for u := int64(1); u <= 2; u++ {
		if c := keyedGrab(a, id, u, "k"+strconv.FormatInt(u, 10)).Code; c != domain.SeckillOK {
			t.Fatalf("user %d on A: %s, want OK", u, c)
		}
	}
	if c := keyedGrab(a, id, 3, "k3").Code; c != domain.SeckillSoldOut {
		t.Fatalf("user 3 on A: %s, want SOLD_OUT", c)
	}
	if err := e.redis.RollBackInPlace(t.Context()); err != nil { // back to the snapshot, in the same process
		t.Fatal(err)
	}
	tag := "{v" + strconv.FormatInt(id, 10) + "}"
	if n := e.rdb.HLen(t.Context(), tag+":req").Val(); n != 0 {
		t.Fatalf("Redis kept %d request ids across the restart: the snapshot did not take them back", n)
	}
	b := e.router(t, nil, actors.Options{})
	sold := map[int64]int64{}
	for u := int64(5); u <= 6; u++ {
		res := keyedGrab(b, id, u, "k"+strconv.FormatInt(u, 10))
		if res.Code != domain.SeckillOK {
			t.Fatalf("user %d on B: %s, want OK", u, res.Code)
		}
		sold[u] = res.OrderID
	}
	if f := e.rdb.Get(t.Context(), tag+":fence").Val(); f != "1" {
		t.Fatalf("fence %q after the rollback and B's claim, want 1 (the same as A's)", f)
	}
	for u, order := range sold {
		if res := keyedGrab(a, id, u, "k"+strconv.FormatInt(u, 10)); res.Code != domain.SeckillOK || res.OrderID != order {
			t.Errorf("user %d's retry on A: %s (order %d), want OK with B's order %d", u, res.Code, res.OrderID, order)
		}
	}
	if res := keyedGrab(a, id, 1, "k1"); res.Code == domain.SeckillOK && !e.rdb.HExists(t.Context(), tag+":req", "u1:k1").Val() {
		t.Errorf("user 1's retry on A: OK with order %d, which Redis no longer holds", res.OrderID)
	}
}

// Redis goes back to a point after the activation's own claim (an
// appendfsync everysec crash, an eviction of the request hash, a restored
// snapshot): fence, load and claim nonce are still the activation's, but
// its last sale is forgotten. The key's retry while stock is left sells it
// again under a new order; taken for the replay of the recorded sale, it
// would make the counts agree again, and after the sell-out the record
// would answer the retry with the order Redis no longer holds.
func TestAKeySoldAgainAfterRedisForgotItsSaleEndsTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 3, 1)
	tag := "{v" + strconv.FormatInt(id, 10) + "}"
	a := e.router(t, nil, actors.Options{})
	if c := keyedGrab(a, id, 1, "k1").Code; c != domain.SeckillOK {
		t.Fatalf("user 1: %s, want OK", c)
	}
	if err := e.rdb.Save(t.Context()).Err(); err != nil { // after the claim and the first sale
		t.Fatal(err)
	}
	if c := keyedGrab(a, id, 2, "k2").Code; c != domain.SeckillOK {
		t.Fatalf("user 2: %s, want OK", c)
	}
	// Back to the snapshot, in the same process (a restart changes the
	// server's run id, and the grab script then refuses the load until it
	// is rebuilt from the database): user 2's sale forgotten, the claim
	// still the activation's.
	if err := e.redis.RollBackInPlace(t.Context()); err != nil {
		t.Fatal(err)
	}
	if e.rdb.HExists(t.Context(), tag+":req", "u2:k2").Val() {
		t.Fatal("Redis kept u2:k2 across the restart: the snapshot did not take it back")
	}
	// Stock is left in the activation's cache, so the retry is a grab and
	// the script sells the key again.
	if c := keyedGrab(a, id, 2, "k2").Code; c != domain.SeckillOK {
		t.Fatalf("user 2's retry after the rollback: %s, want OK", c)
	}
	if c := keyedGrab(a, id, 3, "k3").Code; c != domain.SeckillOK {
		t.Fatalf("user 3: %s, want OK", c)
	}
	if c := keyedGrab(a, id, 4, "k4").Code; c != domain.SeckillSoldOut {
		t.Fatalf("user 4: %s, want SOLD_OUT", c)
	}
	held, err := e.rdb.HGet(t.Context(), tag+":req", "u2:k2").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if res := keyedGrab(a, id, 2, "k2"); res.Code != domain.SeckillOK || res.OrderID != held {
		t.Fatalf("user 2's retry after the sell-out: %s (order %d), want OK with order %d, the one Redis holds", res.Code, res.OrderID, held)
	}
}
