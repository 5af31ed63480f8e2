package writer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// The order log's persistence actor, on real stores: what it does when a
// writer dies, a delivery's reply is lost, Redis loses its data, or a
// sale ends.

func TestOrderWriterTakesOverADeadWritersOrders(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 40))
	// A writer reads the entries and dies without acknowledging them.
	res, err := rdb.XReadGroup(t.Context(), &redis.XReadGroupArgs{
		Group: persistence.OrderLogGroup, Consumer: "dead-node", Streams: []string{persistence.LogKey(v.ID), ">"}, Count: 1000,
	}).Result()
	if err != nil || len(res[0].Messages) != 40 {
		t.Fatalf("dead writer read %v %v", res, err)
	}
	w := testenv.StartOrderWriter(t, db, rdb, writer.Options{ClaimIdle: 300 * time.Millisecond, ClaimEvery: 100 * time.Millisecond})
	testenv.Drained(t, w, 20*time.Second)
	testenv.AssertPersisted(t, db, v, sold)
}

// lostReply loses the reply of the first XREADGROUP that delivers entries
// after Redis has run it, as when Redis dies (or the connection drops)
// between writing the group's pending list to its append-only file and
// sending the reply. The caller sees an error, or, with retried set, what
// go-redis's own retry of the read (MaxRetries, on by default) returns:
// no error at all, and the lost entries never.
type lostReply struct {
	retried bool
	fired   atomic.Bool
}

func (l *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if xr, ok := cmd.(*redis.XStreamSliceCmd); ok && err == nil && len(xr.Val()) > 0 &&
			len(xr.Val()[0].Messages) > 0 && l.fired.CompareAndSwap(false, true) {
			if l.retried {
				return next(ctx, cmd)
			}
			err = errors.New("read tcp: connection reset by peer")
			cmd.SetErr(err)
		}
		return err
	}
}

func (l *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestOrderWriterRereadsALostDelivery: a read whose reply was lost has
// still moved the entries to this writer's pending list; the writer must
// read them again at once, not leave them until another writer's claim
// (ClaimIdle, 30 s by default) takes them over.
func TestOrderWriterRereadsALostDelivery(t *testing.T) {
	t.Parallel()
	for _, retried := range []bool{false, true} {
		t.Run(map[bool]string{false: "re-read when the read fails", true: "re-read when the client silently retried the read"}[retried], func(t *testing.T) {
			t.Parallel()
			db, srv := testenv.MustPostgres(t), testenv.MustRedis(t)
			rdb := srv.Client()
			v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
			wrdb := srv.Client()
			hook := &lostReply{retried: retried}
			wrdb.AddHook(hook)
			w := testenv.StartOrderWriter(t, db, wrdb, writer.Options{MaxBackoff: 100 * time.Millisecond})
			sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 40))
			testenv.Drained(t, w, 10*time.Second)
			if !hook.fired.Load() {
				t.Fatal("no delivery was lost; the test proves nothing")
			}
			testenv.AssertPersisted(t, db, v, sold)
		})
	}
}

// TestOrderWriterDoesNotRecreateLostLogs: when Redis loses its data, the
// writer's list of order logs is stale until it lists them again; reading
// the lost streams meanwhile must not create them anew (empty, unregistered
// streams of vouchers Redis no longer knows, which nothing would ever
// remove). The race is the writer's: each round lasts until it has listed
// the logs again (within a second), so a few rounds catch it.
func TestOrderWriterDoesNotRecreateLostLogs(t *testing.T) {
	t.Parallel()
	db, srv := testenv.MustPostgres(t), testenv.MustRedis(t)
	rdb := srv.Client()
	// The writer's own client counts its listings of the logs: once it
	// has listed them after the loss, its list is no longer stale.
	var listed atomic.Int64
	wrdb := srv.Client()
	wrdb.AddHook(testenv.CommandHook(func(cmd redis.Cmder) {
		if cmd.Name() == "smembers" {
			listed.Add(1)
		}
	}))
	w := testenv.StartOrderWriter(t, db, wrdb, writer.Options{Block: 50 * time.Millisecond})
	for round := range 4 {
		v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
		testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 3))
		testenv.Drained(t, w, 10*time.Second)
		if err := rdb.FlushAll(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		before := listed.Load()
		testenv.WaitFor(t, "the writer to list the logs again", func() bool { return listed.Load() > before })
		if keys := rdb.Keys(t.Context(), "*").Val(); len(keys) != 0 {
			t.Fatalf("round %d: keys after Redis lost its data: %v", round, keys)
		}
	}
}

// The writer stops reading the logs of sales that ended, once they are
// empty, so its work does not grow with every voucher ever sold; the log
// of a running sale, or of an ended one with orders left, stays.
func TestOrderWriterForgetsFinishedLogs(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := context.Background()
	ended := testenv.VoucherSpec{Stock: 5, Limit: 1, Begin: time.Now().Add(-time.Hour), End: time.Now().Add(-2 * time.Minute)}
	endedWithOrders := testenv.MustVoucher(t, db, rdb, ended)
	endedEmpty := testenv.MustVoucher(t, db, rdb, ended)
	live := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5, Limit: 1})
	// An order accepted just before the end, not yet persisted.
	ids := testenv.MustOrderIDs(t, db)
	oid, err := ids.Take(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	err = rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: persistence.LogKey(endedWithOrders.ID), Values: testenv.OrderEntry(oid[0], 7, endedWithOrders.ID, time.Now().Add(-3*time.Minute), 1),
	}).Err()
	if err != nil {
		t.Fatal(err)
	}
	registered := func(v domain.Voucher) bool {
		ok, err := rdb.SIsMember(ctx, "flashsale:order-logs", persistence.LogKey(v.ID)).Result()
		return err == nil && ok
	}
	w := testenv.StartOrderWriter(t, db, rdb, writer.Options{ClaimIdle: 150 * time.Millisecond, ClaimEvery: 50 * time.Millisecond})
	testenv.WaitFor(t, "the finished logs to be unregistered", func() bool {
		return !registered(endedWithOrders) && !registered(endedEmpty)
	})
	if !registered(live) {
		t.Fatal("the log of a running sale was dropped")
	}
	testenv.Drained(t, w, 5*time.Second)
	testenv.AssertPersisted(t, db, endedWithOrders, oid) // persisted before its log was dropped
}
