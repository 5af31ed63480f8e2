package writer_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/internal/lease"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// startWriter takes the writer's lease and runs it until stop (or the
// test's end), as a node does.
func startWriter(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, opts writer.Options) (w *writer.Writer, stop func()) {
	tb.Helper()
	system := actor.NewActorSystem()
	w = orderWriter(db, rdb, system, opts)
	if err := w.Acquire(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { w.Stop(); system.Shutdown() }) }
	tb.Cleanup(stop)
	return w, stop
}

// orderWriter is a persistence actor of the order log, not started.
func orderWriter(db *bun.DB, rdb redis.UniversalClient, system *actor.ActorSystem, opts writer.Options) *writer.Writer {
	return writer.New(testenv.OrderLogFamily(db, rdb, opts), system, testenv.QuietLogger(), opts)
}

// consumers returns the pending count of each consumer of a log's group.
func consumers(tb testing.TB, rdb redis.UniversalClient, log string) map[string]int64 {
	tb.Helper()
	cs, err := rdb.XInfoConsumers(context.Background(), log, persistence.OrderLogGroup).Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := make(map[string]int64, len(cs))
	for _, c := range cs {
		out[c.Name] = c.Pending
	}
	return out
}

// deadPID returns the id of a process of this host that has exited.
func deadPID(tb testing.TB) int {
	tb.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		tb.Fatal(err)
	}
	return cmd.Process.Pid
}

// unreapedPID returns the id of a process of this host that was killed and
// not yet waited for (a zombie, which signal 0 still reaches), as a node
// killed by a supervisor that restarts it before reaping it.
func unreapedPID(tb testing.TB) int {
	tb.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Wait() })
	if err := cmd.Process.Kill(); err != nil {
		tb.Fatal(err)
	}
	for range 100 { // until the kernel has made it a zombie
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat"); err != nil || strings.Contains(string(b), ") Z") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd.Process.Pid
}

// A lease left by a process of this host that is gone is taken at once,
// not after it expires: that process was this node's killed predecessor.
func TestOrderWriterTakesTheLeaseOfADeadProcessAtOnce(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	host, _ := os.Hostname()
	cases := []struct {
		name string
		pid  func(testing.TB) int
	}{
		{"taken at once when its holder exited", deadPID},
		{"taken at once when its holder was killed and not yet reaped", unreapedPID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lease := host + " " + strconv.Itoa(tc.pid(t)) + " killed"
			if err := rdb.Set(t.Context(), "flashsale:consumer:node-b", lease, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			w := orderWriter(db, rdb, nil, writer.Options{Consumer: "node-b"})
			if err := w.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(began); took > time.Second {
				t.Fatalf("took the lease after %v", took)
			}
			rdb.Del(t.Context(), "flashsale:consumer:node-b")
		})
	}
}

// A node restarted under its consumer name re-reads the entries it left
// pending at once, although the lease its killed predecessor held has not
// expired: the predecessor ran on this host and is gone. ClaimIdle is an
// hour, so no takeover can pass for this.
func TestOrderWriterRestartedUnderItsNameResumesAtOnce(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := t.Context()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 40))
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: persistence.OrderLogGroup, Consumer: "node-a", Streams: []string{persistence.LogKey(v.ID), ">"}, Count: 1000,
	}).Result()
	if err != nil || len(res[0].Messages) != 40 {
		t.Fatalf("the dead node's read: %v %v", res, err)
	}
	host, _ := os.Hostname()
	lease := host + " " + strconv.Itoa(deadPID(t)) + " killed"
	if err := rdb.Set(ctx, "flashsale:consumer:node-a", lease, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	w, _ := startWriter(t, db, rdb, writer.Options{Consumer: "node-a", ClaimIdle: time.Hour})
	testenv.Drained(t, w, 5*time.Second)
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("resumed after %v", took)
	}
	testenv.AssertPersisted(t, db, v, sold)
}

// Consumers holding no entry and idle past DeadConsumerIdle are deleted
// from the group; one that holds entries is kept until a live writer has
// claimed them (after ClaimIdle), and is deleted then.
func TestOrderWriterRemovesDeadConsumers(t *testing.T) {
	t.Parallel()
	db, srv := testenv.MustPostgres(t), testenv.MustRedis(t)
	rdb := srv.Client()
	ctx := t.Context()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
	log := persistence.LogKey(v.ID)
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 10))
	if err := rdb.XGroupCreateConsumer(ctx, log, persistence.OrderLogGroup, "gone-empty").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: persistence.OrderLogGroup, Consumer: "gone-holding", Streams: []string{log, ">"}, Count: 3,
	}).Err(); err != nil {
		t.Fatal(err)
	}
	opts := writer.Options{Consumer: "first", ClaimIdle: time.Hour, ClaimEvery: 50 * time.Millisecond, DeadConsumerIdle: 300 * time.Millisecond}
	// Each pass over the dead consumers follows a claim (XAUTOCLAIM) of
	// the writer's, on its own client: counting the claims counts passes.
	var claims atomic.Int64
	wrdb := srv.Client()
	wrdb.AddHook(testenv.CommandHook(func(cmd redis.Cmder) {
		if cmd.Name() == "xautoclaim" {
			claims.Add(1)
		}
	}))
	_, stop := startWriter(t, db, wrdb, opts)
	testenv.WaitFor(t, "the idle consumer holding nothing to be deleted", func() bool {
		_, ok := consumers(t, rdb, log)["gone-empty"]
		return !ok
	})
	passes := claims.Load()
	testenv.WaitFor(t, "ten more passes", func() bool { return claims.Load() > passes+10 })
	if got := consumers(t, rdb, log); got["gone-holding"] != 3 {
		t.Fatalf("a consumer holding 3 entries was deleted or robbed: %v", got)
	}
	stop()

	t.Run("a consumer holding entries is deleted once they are claimed", func(t *testing.T) {
		opts.Consumer, opts.ClaimIdle = "second", 200*time.Millisecond
		w, _ := startWriter(t, db, rdb, opts)
		testenv.Drained(t, w, 10*time.Second)
		testenv.AssertPersisted(t, db, v, sold)
		// "first", stopped, is gone too.
		testenv.WaitFor(t, "only the live consumer to be left", func() bool {
			got := consumers(t, rdb, log)
			_, ok := got["gone-holding"]
			return !ok && len(got) == 1 && got["second"] == 0
		})
	})
}

// Two running processes never share a consumer name: a writer whose name
// is held by a live writer refuses to start once the lease has had its
// time to expire; a name released by a writer that stopped, or whose lease
// expired, is taken.
func TestOrderWriterRefusesANameInUse(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	// The holder renews at a third of the lease: 3 s leaves a loaded
	// machine (the race detector, two cores) a second between renewals.
	opts := writer.Options{Consumer: "twin", ConsumerLease: 3 * time.Second}
	_, stop := startWriter(t, db, rdb, opts)

	began := time.Now()
	err := orderWriter(db, rdb, nil, opts).Acquire(t.Context())
	if !errors.Is(err, lease.ErrInUse) {
		t.Fatalf("second writer with the same name: %v", err)
	}
	if took := time.Since(began); took < opts.ConsumerLease {
		t.Fatalf("refused after %v, before a lease left by a dead writer could have expired", took)
	}
	t.Logf("refused: %v", err)

	stop()
	if err := orderWriter(db, rdb, nil, opts).Acquire(t.Context()); err != nil {
		t.Fatalf("after the first writer stopped: %v", err)
	}
	rdb.Del(t.Context(), "flashsale:consumer:twin")

	// Held by a process of another host that stopped refreshing it.
	if err := rdb.Set(t.Context(), "flashsale:consumer:twin", "elsewhere 1 x", 1500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if err := orderWriter(db, rdb, nil, opts).Acquire(t.Context()); err != nil {
		t.Fatalf("a lease that expired: %v", err)
	}
}

// Taking over a dead node's entries is a cluster-wide singleton under a
// Redlock lease: while another node holds the reclaim lease this writer
// leaves them alone, and once the lease is free it takes them over.
func TestOrderLogReclaimRunsUnderTheRedlockSingleton(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := t.Context()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 20))
	if _, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: persistence.OrderLogGroup, Consumer: "dead-node", Streams: []string{persistence.LogKey(v.ID), ">"}, Count: 1000,
	}).Result(); err != nil {
		t.Fatal(err)
	}
	locks := lease.New([]redis.UniversalClient{rdb}, persistence.LeaseKey, 2*time.Second, testenv.QuietLogger())
	held := make(chan struct{})
	release := make(chan struct{})
	go func() { // another node reclaims (and never finishes) meanwhile
		_, _ = locks.Do(context.Background(), "order-log-reclaim", func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	var turns atomic.Int64 // the writer's turns at reclaiming
	w, _ := startWriter(t, db, rdb, writer.Options{
		Consumer: "live-node", ClaimIdle: 50 * time.Millisecond, ClaimEvery: 50 * time.Millisecond,
		Reclaim: func(ctx context.Context, fn func(context.Context) error) (bool, error) {
			ran, err := locks.Do(ctx, "order-log-reclaim", fn)
			turns.Add(1)
			return ran, err
		},
	})
	testenv.WaitFor(t, "ten turns at reclaiming while the lease is held", func() bool { return turns.Load() >= 10 })
	if n := consumers(t, rdb, persistence.LogKey(v.ID))["dead-node"]; n != 20 {
		t.Fatalf("the dead node holds %d entries while another node held the reclaim lease, want 20", n)
	}
	close(release)
	testenv.Drained(t, w, 10*time.Second)
	testenv.AssertPersisted(t, db, v, sold)
}
