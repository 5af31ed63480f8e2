package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// clusterClient is a client of a Redis Cluster of nodes as the service
// builds it in REDIS_MODE=cluster, tuned by tu.
func clusterClient(tb testing.TB, url string, tu persistence.ClientTuning) redis.UniversalClient {
	tb.Helper()
	target, err := persistence.ParseRedisTarget(persistence.RedisCluster, url)
	if err != nil {
		tb.Fatal(err)
	}
	rdb := target.Client(tu)
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// ackedClusterGrabs is a Redis Cluster with a replica per primary, a
// request-path client of it whose read timeout leaves room for WAIT, a
// database, and the grab store on them waiting for one replica.
func ackedClusterGrabs(t *testing.T) (*testenv.RedisCluster, redis.UniversalClient, *bun.DB, *persistence.Grabs, *persistence.OrderIDs) {
	t.Helper()
	cl := testenv.MustReplicatedCluster(t)
	tuning := persistence.RequestTuning(0)
	tuning.Read += 2 * ackTimeout
	rdb := clusterClient(t, cl.URL(), tuning)
	db := testenv.MustPostgres(t)
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	g.Acks = persistence.Acks{Replicas: 1, Timeout: ackTimeout}
	return cl, rdb, db, g, ids
}

// primaryOf is the address of the primary that holds key.
func primaryOf(tb testing.TB, rdb redis.UniversalClient, key string) string {
	tb.Helper()
	node, err := rdb.(*redis.ClusterClient).MasterForKey(tb.Context(), key)
	if err != nil {
		tb.Fatal(err)
	}
	return node.Options().Addr
}

// On a real three-primary Redis Cluster, each voucher's keys share its
// hash tag, so its preheat, claim and grab scripts run on one node, and
// six vouchers spread over the primaries each sell exactly their stock;
// their logs, read one hash slot at a time, give the order log's store
// every order sold. Red packets on several primaries reach the database
// alike through theirs.
func TestOnARedisClusterEveryOrderSoldReachesTheDatabase(t *testing.T) {
	t.Parallel()
	url := testenv.ClusterURL(testenv.MustRedisCluster(t, 3)...)
	rdb := clusterClient(t, url, persistence.RequestTuning(time.Second))
	bg := clusterClient(t, url, persistence.BackgroundTuning())
	db := testenv.MustPostgres(t)
	const stock, vouchers = 5, 6
	primaries := map[string]bool{}
	var sold []int64
	for range vouchers {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: stock})
		primaries[primaryOf(t, rdb, persistence.LogKey(v.ID))] = true
		users := make([]int64, 2*stock)
		for i := range users {
			users[i] = int64(i + 1)
		}
		got := testenv.Sell(t, db, rdb, v.ID, users)
		if len(got) != stock {
			t.Fatalf("voucher %d sold %d of %d", v.ID, len(got), stock)
		}
		sold = append(sold, got...)
	}
	if len(primaries) < 2 {
		t.Fatalf("the vouchers all live on %v: want them spread over at least two primaries", primaries)
	}

	drainOrders(t, db, bg)
	var stored []int64
	if err := db.NewSelect().Table("tb_voucher_order").Column("id").Order("id").Scan(t.Context(), &stored); err != nil {
		t.Fatal(err)
	}
	slices.Sort(sold)
	if !slices.Equal(stored, sold) {
		t.Fatalf("the database holds %d orders, %d were sold: %v, want %v", len(stored), len(sold), stored, sold)
	}

	r := persistence.NewRedPacketRedis(rdb)
	store := persistence.NewRedPacketStore(db, r)
	rpPrimaries := map[string]bool{}
	for id := int64(1); id <= 4; id++ {
		testenv.MustRedPacket(t, store, id, []int64{30, 20, 10}, time.Minute)
		rpPrimaries[primaryOf(t, rdb, persistence.RedPacketLogKey(id))] = true
		out, err := r.Grab(t.Context(), id, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}, {RequestID: "b", UserID: 2}})
		if err != nil || testenv.RedPacketCodes(out) != "OK:30 OK:20 " {
			t.Fatalf("red packet %d: %v %s", id, err, testenv.RedPacketCodes(out))
		}
	}
	if len(rpPrimaries) < 2 {
		t.Fatalf("the red packets all live on %v: want them spread over at least two primaries", rpPrimaries)
	}
	drainRedPackets(t, db, bg)
	var grabbed int
	if err := db.NewSelect().Model((*persistence.GrabRow)(nil)).ColumnExpr("count(*)").Scan(t.Context(), &grabbed); err != nil {
		t.Fatal(err)
	}
	if grabbed != 8 {
		t.Fatalf("the database holds %d red-packet grabs, want the 8 answered OK", grabbed)
	}
}

// With REDIS_ACK_REPLICAS on a Redis Cluster, a batch's WAIT goes to the
// primary that ran its script and counts that shard's replicas: with the
// replica of one voucher's shard stopped, that voucher's batch fails with
// ErrNotAcknowledged (the script ran: not "not sent"), while a voucher on
// another shard is acknowledged; once the replica is back, the same
// request ids are answered with the orders first sold.
func TestOnARedisClusterAGrabIsAcknowledgedByItsOwnShardsReplicas(t *testing.T) {
	t.Parallel()
	cl, rdb, db, g, ids := ackedClusterGrabs(t)

	// Two vouchers on different primaries.
	var stalled, other domain.Voucher
	var stalledPrimary *testenv.RedisServer
	for stalledPrimary == nil || other.ID == 0 {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
		p, err := cl.PrimaryOf(t.Context(), persistence.LogKey(v.ID))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case stalledPrimary == nil:
			stalled, stalledPrimary = v, p
		case p != stalledPrimary:
			other = v
		}
	}
	replicas, err := cl.ReplicasOf(t.Context(), stalledPrimary)
	if err != nil || len(replicas) == 0 {
		t.Fatalf("replicas of %s: %v %v", stalledPrimary.Addr(), replicas, err)
	}
	fences := map[int64]int64{}
	for _, v := range []domain.Voucher{stalled, other} {
		if fences[v.ID], _, err = g.Claim(t.Context(), v.ID, 0); err != nil {
			t.Fatal(err)
		}
	}

	for _, r := range replicas {
		r.Pause()
	}
	paused := true
	defer func() {
		if paused {
			for _, r := range replicas {
				r.Continue()
			}
		}
	}()
	held := testenv.Grabs(t, ids, 1, 2)
	out, err := g.Grab(call(t), stalled.ID, 0, fences[stalled.ID], held)
	if !errors.Is(err, persistence.ErrNotAcknowledged) || errors.Is(err, domain.ErrNotSent) {
		t.Fatalf("batch on the shard whose replica is stopped: %v %v, want ErrNotAcknowledged", codes(out), err)
	}
	out, err = g.Grab(call(t), other.ID, 0, fences[other.ID], testenv.Grabs(t, ids, 1, 2))
	if err != nil || fmt.Sprint(codes(out)) != "[OK OK]" {
		t.Fatalf("batch on a shard with its replica: %v %v, want acknowledged", codes(out), err)
	}

	for _, r := range replicas {
		r.Continue()
	}
	paused = false
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		out, err = g.Grab(call(t), stalled.ID, 0, fences[stalled.ID], held)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || fmt.Sprint(codes(out)) != "[OK OK]" {
		t.Fatalf("retry once the replica is back: %v %v", codes(out), err)
	}
	for i, r := range out.Results {
		if r.OrderID != held[i].OrderID {
			t.Fatalf("request %s answered order %d, want %d, the order first sold", held[i].RequestID, r.OrderID, held[i].OrderID)
		}
	}
}

// A Redis Cluster node that refuses a grab batch without running it
// answers MOVED (its slot is served elsewhere) or CLUSTERDOWN (the
// cluster lost a primary and cannot serve): the batch is
// domain.ErrNotSent, so the voucher's actor knows it sold nothing, and a
// client hears UNAVAILABLE, not an internal error.
func TestOnARedisClusterARefusedGrabIsNotSent(t *testing.T) {
	t.Parallel()
	nodes := testenv.MustRedisCluster(t, 3)
	for _, n := range nodes { // Redis's default: no primary for a slot, no service at all
		if err := n.Client().ConfigSet(t.Context(), "cluster-require-full-coverage", "yes").Err(); err != nil {
			t.Fatal(err)
		}
	}
	rdb := clusterClient(t, testenv.ClusterURL(nodes...), persistence.RequestTuning(time.Second))
	db := testenv.MustPostgres(t)
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10})
	holder := primaryOf(t, rdb, persistence.LogKey(v.ID))
	var at, elsewhere *testenv.RedisServer
	for _, n := range nodes {
		if n.Addr() == holder {
			at = n
		} else {
			elsewhere = n
		}
	}
	ids := testenv.MustOrderIDs(t, db)
	grabOn := func(n *testenv.RedisServer) error {
		g := persistence.NewGrabs(persistence.SingleTarget(redis.Options{Addr: n.Addr()}).Client(persistence.RequestTuning(time.Second)))
		_, err := g.Grab(t.Context(), v.ID, 0, 1, testenv.Grabs(t, ids, 1))
		return err
	}

	if err := grabOn(elsewhere); !errors.Is(err, domain.ErrNotSent) || !strings.Contains(err.Error(), "MOVED") {
		t.Fatalf("a batch sent to a node without the voucher's slot: %v, want MOVED, not sent", err)
	}
	elsewhere.Kill() // the cluster loses a primary's slots: every node refuses
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		err := grabOn(at)
		if errors.Is(err, domain.ErrNotSent) && strings.Contains(err.Error(), "CLUSTERDOWN") {
			break
		}
		if err != nil && !strings.Contains(err.Error(), "CLUSTERDOWN") && !strings.Contains(err.Error(), "fence") {
			t.Fatalf("a batch while the cluster is down: %v, want CLUSTERDOWN, not sent", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("the cluster never said it was down: last %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// On a Redis Cluster of Redis 7 servers, stock announcements travel on a
// sharded channel (SPUBLISH): a live subscription hears them, from the
// one shard that serves the channel, while a plain subscriber of the
// stock channel, which a PUBLISH would reach on any node, hears nothing.
func TestOnARedisClusterStockAnnouncementsUseShardedPubSub(t *testing.T) {
	t.Parallel()
	nodes := testenv.MustRedisCluster(t, 3)
	bg := clusterClient(t, testenv.ClusterURL(nodes...), persistence.BackgroundTuning())
	live := persistence.NewLive(bg)
	sub := live.Subscribe(t.Context())
	defer sub.Close()
	plain := nodes[0].Client().Subscribe(t.Context(), "flashsale:stock-changed")
	defer plain.Close()
	if _, err := plain.Receive(t.Context()); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	heard := make(chan error, 1)
	go func() {
		for {
			a, err := sub.Next(ctx)
			if err != nil || a.Kind == domain.StockChanged && fmt.Sprint(a.IDs) == "[7]" {
				heard <- err
				return
			}
		}
	}()
	tick := time.NewTicker(50 * time.Millisecond) // until the subscription is in place
	defer tick.Stop()
	for done := false; !done; {
		if err := live.PublishStock(ctx, []int64{7}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-heard:
			if err != nil {
				t.Fatalf("the live subscription heard nothing: %v", err)
			}
			done = true
		case <-tick.C:
		}
	}
	quiet, stop := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer stop()
	if msg, err := plain.ReceiveMessage(quiet); err == nil {
		t.Fatalf("a plain subscriber heard %q: the announcement was broadcast, not sharded", msg.Payload)
	}
}

// seenCommands notes the commands a client sends, by name.
type seenCommands struct {
	mu    sync.Mutex
	names map[string]int
}

func (s *seenCommands) note(cmd redis.Cmder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[cmd.Name()]++
}

func (s *seenCommands) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

// The hooks the service puts on a cluster client (the breaker, the error
// counter) see the acknowledged grab's script and WAIT, which go straight
// to the key's primary, and the cluster client's own calls alike.
func TestOnARedisClusterHooksSeeTheCallsMadeOnTheKeysPrimary(t *testing.T) {
	t.Parallel()
	nodes := testenv.MustRedisCluster(t, 3)
	rdb := clusterClient(t, testenv.ClusterURL(nodes...), persistence.RequestTuning(time.Second))
	seen := &seenCommands{names: map[string]int{}}
	persistence.AddHooks(rdb, testenv.CommandHook(seen.note))
	db := testenv.MustPostgres(t)
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10})
	g := persistence.NewGrabs(rdb)
	g.Acks = persistence.Acks{Replicas: 1, Timeout: 50 * time.Millisecond} // no replica: not acknowledged
	fence, _, err := g.Claim(t.Context(), v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Grab(call(t), v.ID, 0, fence, testenv.Grabs(t, testenv.MustOrderIDs(t, db), 1)); !errors.Is(err, persistence.ErrNotAcknowledged) {
		t.Fatalf("grab without replicas: %v, want ErrNotAcknowledged", err)
	}
	if seen.count("wait") == 0 || seen.count("evalsha")+seen.count("eval") < 2 {
		t.Fatalf("the hooks saw %v: want the claim's and the grab's scripts and the grab's WAIT", seen.names)
	}
}

// When a Redis Cluster primary dies and its replica is promoted, a grab
// reaches the new primary within a second of the promotion, on the path
// that waits for replicas too (the script and its WAIT go to the key's
// primary, which go-redis's own redirects never refresh): each refused
// connection or redirect reloads the slot map (slotMapRefresh). Without it
// the grab went to the dead primary until go-redis's own reload, up to
// 60 s later.
func TestOnARedisClusterAGrabFollowsThePromotedReplicaAtOnce(t *testing.T) {
	t.Parallel()
	cl, rdb, db, g, ids := ackedClusterGrabs(t)
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100})
	ctx := t.Context()
	fence, _, err := g.Claim(ctx, v.ID, 0)
	if err != nil || fence == 0 {
		t.Fatalf("claim: %d %v", fence, err)
	}
	grab := func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*ackTimeout)
		defer cancel()
		_, err := g.Grab(cctx, v.ID, 0, fence, testenv.Grabs(t, ids, 1))
		return err
	}
	if err := grab(); err != nil {
		t.Fatalf("a grab before the failover: %v", err)
	}
	old, err := cl.KillPrimaryOf(ctx, persistence.LogKey(v.ID))
	if err != nil {
		t.Fatal(err)
	}
	// Grabs go on during the failover, as buyers' do, and fail.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				_ = grab()
			}
		}
	}()
	promoted, err := cl.WaitPromoted(ctx, old)
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	// The new primary has another run id: the load is not verified there,
	// and the batch is answered NOT_FOUND without an error (after a WAIT
	// that times out: the promoted primary has no replica left).
	at := time.Now()
	var last error
	var took time.Duration
	for time.Since(at) < 10*time.Second {
		sent := time.Since(at)
		if last = grab(); last == nil {
			took = sent
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the first grab the new primary %s answered was sent %v after the promotion (last error %v)", promoted.Addr(), took, last)
	if last != nil || took > time.Second {
		t.Fatalf("the first grab the promoted replica answered was sent %v after its promotion (%v), want within 1 s", took, last)
	}
}

// A client that made no call while a primary failed over keeps its old
// slot map (go-redis reloads it every 60 s, or when a call of its own is
// refused): its first call after the promotion went to the dead primary,
// a refused grab and 0.5-0.9 s more without a sale in the fault suite.
// ReloadSlotMaps, which a node runs when its breaker's probe finds the
// old primary gone, makes every client of the target follow at once.
func TestReloadSlotMapsMakesAnIdleClusterClientFollowAPromotion(t *testing.T) {
	t.Parallel()
	cl := testenv.MustReplicatedCluster(t)
	target, err := persistence.ParseRedisTarget(persistence.RedisCluster, cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	idle := target.Client(persistence.RequestTuning(0))
	t.Cleanup(func() { _ = idle.Close() })
	ctx := t.Context()
	key := persistence.LogKey(1)
	if err := idle.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := cl.KillPrimaryOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := cl.WaitPromoted(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if got := primaryOf(t, idle, key); got != old.Addr() {
		t.Fatalf("the idle client found the promotion by itself (%s): the test shows nothing", got)
	}
	target.ReloadSlotMaps(ctx)
	deadline := time.Now().Add(time.Second)
	for primaryOf(t, idle, key) != promoted.Addr() {
		if time.Now().After(deadline) {
			t.Fatalf("the idle client still sends %s to %s a second after ReloadSlotMaps, want the promoted %s",
				key, primaryOf(t, idle, key), promoted.Addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := idle.Set(ctx, key, "after", 0).Err(); err != nil {
		t.Fatalf("the idle client's first call after the promotion: %v", err)
	}
}
