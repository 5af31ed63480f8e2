package catalog_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

var quiet = slog.New(slog.DiscardHandler)

// statusBound is how long Redis may go on selling a voucher whose pause it
// missed, once it answers again: the sync's interval plus one run (a
// query and one round trip), given a second on a loaded test machine.
const statusBound = catalog.StatusSyncIntervalDefault + time.Second

// redisStatus is the status the grab script reads: the voucher's metadata.
func redisStatus(tb testing.TB, rdb redis.UniversalClient, id int64) string {
	tb.Helper()
	s, err := rdb.HGet(context.Background(), "{v"+strconv.FormatInt(id, 10)+"}:meta", "status").Result()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// proxiedPostgres returns the database URL with its host replaced by a
// proxy the test can take down.
func proxiedPostgres(tb testing.TB, dbURL string) (string, *testenv.Proxy) {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	p := testenv.MustProxy(tb, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// A pause committed in Postgres whose copy to Redis failed (the node's
// Redis connections refused, through a proxy) is answered as done, and
// Redis says PAUSED within the bound once it answers again, so that a grab
// is answered PAUSED: from the memory of the node that made the change
// while Postgres refuses it too, and from the record on a node that never
// saw the change (the one that made it died).
func TestAStatusChangeRedisMissedReachesItWithinTheBound(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// sync starts the status sync that must bring Redis in step, once
		// the changing node's Redis answers again, and returns its node's
		// catalog.
		sync func(t *testing.T, n *statusNode) *catalog.Service
	}{
		{"the node that made it copies it from memory while postgres refuses", func(t *testing.T, n *statusNode) *catalog.Service {
			n.pgProxy.Down()
			n.redisProxy.Up()
			return n.startSync(t, n.catalog)
		}},
		{"another node copies it from the record", func(t *testing.T, n *statusNode) *catalog.Service {
			other := catalog.New(persistence.NewVouchers(n.db), persistence.NewStock(n.redis), quiet)
			return n.startSync(t, other)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newStatusNode(t)
			n.redisProxy.Down()
			got, err := n.catalog.SetStatus(context.Background(), n.voucher.ID, domain.StatusPaused)
			if err != nil || got.Status != domain.StatusPaused {
				t.Fatalf("pause answered %+v, %v; want the committed pause", got, err)
			}
			if s := redisStatus(t, n.redis, n.voucher.ID); s != "1" {
				t.Fatalf("redis status %s right after the failed copy, want still 1 (ACTIVE): the test did not make the copy fail", s)
			}

			began := time.Now()
			cat := tc.sync(t, n)
			for redisStatus(t, n.redis, n.voucher.ID) != "2" && time.Since(began) <= statusBound {
				time.Sleep(time.Millisecond)
			}
			if s := redisStatus(t, n.redis, n.voucher.ID); s != "2" {
				t.Errorf("redis status %s %v after it answered again, want 2 (PAUSED) within %v", s, time.Since(began), statusBound)
			}
			r := actors.NewRouter(persistence.NewGrabs(n.redis), testenv.MustOrderIDs(t, n.db), cat, quiet, actors.Options{})
			t.Cleanup(r.Stop)
			if res := r.Grab(context.Background(), domain.GrabRequest{VoucherID: n.voucher.ID, UserID: 7}); res.Code != domain.SeckillPaused {
				t.Fatalf("grab after the pause answered %+v, want PAUSED", res)
			}
		})
	}
}

// The admin call itself retries a failed copy once: a copy that fails
// once (a dropped connection) is in Redis when the call returns, with no
// sync running.
func TestSetStatusRetriesACopyThatFailedOnce(t *testing.T) {
	t.Parallel()
	db, srv := testenv.MustPostgres(t), testenv.MustRedis(t)
	direct := srv.Client()
	v := testenv.MustVoucher(t, db, direct, testenv.VoucherSpec{})
	node := srv.Client()
	drop := &dropFirstScript{}
	node.AddHook(drop)
	cat := catalog.New(persistence.NewVouchers(db), persistence.NewStock(node), quiet)
	if _, err := cat.SetStatus(context.Background(), v.ID, domain.StatusPaused); err != nil {
		t.Fatal(err)
	}
	if !drop.dropped.Load() {
		t.Fatal("no script call was dropped: the test did not make the first copy fail")
	}
	if s := redisStatus(t, direct, v.ID); s != "2" {
		t.Fatalf("redis status %s when the call returned, want 2 (PAUSED)", s)
	}
}

// statusNode is a node's view of the stores for a status change: Redis
// and Postgres through proxies the test can take down, the voucher, and
// direct clients that see the truth.
type statusNode struct {
	db         *bun.DB
	redis      *redis.Client // direct
	redisProxy *testenv.Proxy
	pgProxy    *testenv.Proxy
	catalog    *catalog.Service // over the proxies
	voucher    domain.Voucher
}

func newStatusNode(t *testing.T) *statusNode {
	t.Helper()
	dbURL := testenv.MustPostgresURL(t)
	srv := testenv.MustRedis(t)
	n := &statusNode{db: testenv.MustOpen(t, dbURL), redis: srv.Client()}
	n.voucher = testenv.MustVoucher(t, n.db, n.redis, testenv.VoucherSpec{})
	n.redisProxy = testenv.MustProxy(t, srv.Addr())
	nodeRedis := redis.NewClient(persistence.RequestClientOptions(redis.Options{Addr: n.redisProxy.Addr()}, 0))
	t.Cleanup(func() { _ = nodeRedis.Close() })
	viaProxy, pgProxy := proxiedPostgres(t, dbURL)
	n.pgProxy = pgProxy
	n.catalog = catalog.New(persistence.NewVouchers(testenv.MustOpen(t, viaProxy)), persistence.NewStock(nodeRedis), quiet)
	return n
}

// startSync runs c's status sync, at the production interval, until the
// test ends.
func (n *statusNode) startSync(t *testing.T, c *catalog.Service) *catalog.Service {
	t.Helper()
	sync := catalog.NewStatusSync(c, 0, quiet)
	if err := sync.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sync.Stop)
	return c
}

// dropFirstScript fails the first script call of a client before it is
// sent, as a dropped connection would.
type dropFirstScript struct{ dropped atomic.Bool }

func (d *dropFirstScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d *dropFirstScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && d.dropped.CompareAndSwap(false, true) {
			err := errors.New("connection reset by peer")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (d *dropFirstScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
