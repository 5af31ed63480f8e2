package persistence_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

func codes(out domain.BatchOutcome) []domain.SeckillCode {
	cs := make([]domain.SeckillCode, len(out.Results))
	for i, r := range out.Results {
		cs[i] = r.Code
	}
	return cs
}

func TestGrabScriptSellsInOrderWithinStockAndLimit(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 3, Limit: 1})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	fence, st, err := g.Claim(t.Context(), v.ID, 0)
	if err != nil || !st.Found || st.Remaining != 3 || st.Limit != 1 {
		t.Fatalf("claim: %v %+v", err, st)
	}
	// User 2 comes back after the sell-out: at their limit, they hear
	// that, not SOLD_OUT.
	out, err := g.Grab(t.Context(), v.ID, 0, fence, testenv.Grabs(t, ids, 1, 2, 1, 3, 4, 5, 2))
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.SeckillCode{"OK", "OK", "LIMIT_REACHED", "OK", "SOLD_OUT", "SOLD_OUT", "LIMIT_REACHED"}
	if fmt.Sprint(codes(out)) != fmt.Sprint(want) || out.State.Remaining != 0 {
		t.Fatalf("codes %v remaining %d, want %v and 0", codes(out), out.State.Remaining, want)
	}
	if n, _ := persistence.InFlight(t.Context(), rdb, v.ID); n != 3 {
		t.Fatalf("order log holds %d, want 3", n)
	}
}

func TestGrabScriptIsIdempotentPerRequest(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 5})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	fence, _, _ := g.Claim(t.Context(), v.ID, 0)
	batch := testenv.Grabs(t, ids, 7, 7, 8)
	first, err := g.Grab(t.Context(), v.ID, 0, fence, batch)
	if err != nil {
		t.Fatal(err)
	}
	// The same batch again (a retry after a lost reply), and the same
	// request inside a later batch: nothing is sold twice.
	again, err := g.Grab(t.Context(), v.ID, 0, fence, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		if first.Results[i] != again.Results[i] || first.Results[i].Code != domain.SeckillOK {
			t.Fatalf("grab %d: first %+v, retry %+v", i, first.Results[i], again.Results[i])
		}
	}
	if again.State.Remaining != 7 {
		t.Fatalf("remaining %d after a retried batch, want 7", again.State.Remaining)
	}
	if n, _ := persistence.InFlight(t.Context(), rdb, v.ID); n != 3 {
		t.Fatalf("order log holds %d entries, want 3", n)
	}
}

func TestGrabScriptRefusesAStaleFence(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	old, _, _ := g.Claim(t.Context(), v.ID, 0)
	newer, _, _ := g.Claim(t.Context(), v.ID, 0)
	out, err := g.Grab(t.Context(), v.ID, 0, old, testenv.Grabs(t, ids, 1))
	if err != nil || !out.Stale {
		t.Fatalf("old fence: stale=%v err=%v", out.Stale, err)
	}
	if got, _ := rdb.Get(t.Context(), fmt.Sprintf("{v%d}:stock", v.ID)).Int(); got != 10 {
		t.Fatalf("a stale batch changed stock to %d", got)
	}
	if out, err := g.Grab(t.Context(), v.ID, 0, newer, testenv.Grabs(t, ids, 1)); err != nil || out.Stale || out.Results[0].Code != domain.SeckillOK {
		t.Fatalf("newest fence: %+v %v", out, err)
	}
}

func TestGrabScriptChecksWindowAndStatus(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	now := time.Now()
	early := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5, Limit: 1, Begin: now.Add(time.Hour), End: now.Add(2 * time.Hour)})
	late := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5, Limit: 1, Begin: now.Add(-2 * time.Hour), End: now.Add(-time.Hour)})
	paused := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5, Limit: 1})
	if err := persistence.NewStock(rdb).SetStatus(t.Context(), paused.ID, domain.StatusPaused, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		id   int64
		want domain.SeckillCode
	}{
		{"before the window", early.ID, domain.SeckillNotStarted},
		{"after the window", late.ID, domain.SeckillEnded},
		{"paused", paused.ID, domain.SeckillPaused},
		{"unknown voucher", 999_999, domain.SeckillNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fence, _, _ := g.Claim(t.Context(), tc.id, 0)
			out, err := g.Grab(t.Context(), tc.id, 0, fence, testenv.Grabs(t, ids, 1, 2))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range codes(out) {
				if c != tc.want {
					t.Fatalf("codes %v, want %s", codes(out), tc.want)
				}
			}
		})
	}
}

// A node starting up reads the vouchers, an admin pauses one, then the
// start-up preheat writes what it read: the older version must not win.
func TestPreheatNeverRevertsANewerStatus(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	ctx := context.Background()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
	vouchers, stock := persistence.NewVouchers(db), persistence.NewStock(rdb)
	cat := catalog.New(vouchers, stock, quiet)

	stale, _ := vouchers.Get(ctx, v.ID) // what the start-up preheat read
	if _, err := cat.SetStatus(ctx, v.ID, domain.StatusPaused); err != nil {
		t.Fatal(err)
	}
	if _, err := stock.Preheat(ctx, domain.LoadSnapshot{Voucher: stale}, domain.NewLoadStamp()); err != nil {
		t.Fatal(err)
	}
	g := persistence.NewGrabs(rdb)
	fence, st, _ := g.Claim(ctx, v.ID, 0)
	out, err := g.Grab(ctx, v.ID, 0, fence, []domain.Grab{{RequestID: "r1", UserID: 1, OrderID: 42}})
	if err != nil || out.Results[0].Code != domain.SeckillPaused {
		t.Fatalf("paused in the database, redis status %d, grab %+v %v", st.Status, out.Results, err)
	}
}

func TestGrabScriptSurvivesRedisLosingItsScripts(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 5, Limit: 1})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	fence, _, _ := g.Claim(t.Context(), v.ID, 0)
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	out, err := g.Grab(t.Context(), v.ID, 0, fence, testenv.Grabs(t, ids, 1))
	if err != nil || out.Results[0].Code != domain.SeckillOK {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", out, err)
	}
}

// TestRefenceTakesANewFenceOnlyForTheNewestActivation: an activation that
// holds the newest fence takes a newer one, after which a call under its
// old fence is refused (a call Redis held undecided can no longer sell);
// one whose fence was superseded takes nothing and is told so.
func TestRefenceTakesANewFenceOnlyForTheNewestActivation(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 3, Limit: 1})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	old, _, err := g.Claim(t.Context(), v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	newest, _, err := g.Claim(t.Context(), v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f, _, superseded, err := g.Refence(t.Context(), v.ID, 0, old); err != nil || !superseded || f != 0 {
		t.Fatalf("refence of a superseded fence: %d superseded %v, %v; want refused", f, superseded, err)
	}
	f, st, superseded, err := g.Refence(t.Context(), v.ID, 0, newest)
	if err != nil || superseded || f <= newest || !st.Found || st.Remaining != 3 {
		t.Fatalf("refence of the newest fence: %d %+v superseded %v, %v; want a newer fence and the state", f, st, superseded, err)
	}
	if out, err := g.Grab(t.Context(), v.ID, 0, newest, testenv.Grabs(t, ids, 1)); err != nil || !out.Stale {
		t.Fatalf("a call under the fence before the refence: %+v %v; want stale", out, err)
	}
	if out, err := g.Grab(t.Context(), v.ID, 0, f, testenv.Grabs(t, ids, 1)); err != nil || out.Stale || codes(out)[0] != domain.SeckillOK {
		t.Fatalf("a call under the new fence: %+v %v; want OK", out, err)
	}
}

// A restart of Redis, even one that keeps every write (append-only file,
// fsync always), is a new process with a new run id: the grab script and
// the claim then treat the voucher as one Redis does not hold, selling
// nothing from a state that may be older than what was sold, and the next
// preheat rebuilds the load from the database and the order log
// (domain.LoadRebuilt), after which sales go on from where they were.
func TestGrabSellsOnlyFromALoadVerifiedOnTheRunningServer(t *testing.T) {
	t.Parallel()
	db, srv := testenv.MustPostgres(t), testenv.MustDurableRedis(t)
	rdb := srv.Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 3, Limit: 1})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	ctx := t.Context()
	fence, _, err := g.Claim(ctx, v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	first := testenv.Grabs(t, ids, 1)
	if out, err := g.Grab(ctx, v.ID, 0, fence, first); err != nil || out.Results[0].Code != domain.SeckillOK {
		t.Fatalf("before the restart: %+v %v", out, err)
	}
	srv.Restart() // SIGKILL, then the same files: nothing lost, a new process
	out, err := g.Grab(ctx, v.ID, 0, fence, testenv.Grabs(t, ids, 2))
	if err != nil || out.State.Found || out.Results[0].Code != domain.SeckillNotFound {
		t.Fatalf("after the restart, the grab: %+v %v; want the voucher treated as not held", out, err)
	}
	if _, st, err := g.Claim(ctx, v.ID, 0); err != nil || st.Found {
		t.Fatalf("after the restart, the claim: %+v %v; want the voucher treated as not held", st, err)
	}
	var res domain.LoadResult
	err = persistence.NewVouchers(db).Preload(ctx, v.ID, func(ctx context.Context, snap domain.LoadSnapshot) (string, error) {
		stock := persistence.NewStock(rdb)
		stock.ReloadHold = time.Millisecond
		stamp := domain.NewLoadStamp()
		var err error
		res, err = stock.Preheat(ctx, snap, stamp)
		return stamp, err
	})
	if err != nil || res != domain.LoadRebuilt {
		t.Fatalf("preheat after the restart: %v %v; want the load rebuilt", res, err)
	}
	time.Sleep(5 * time.Millisecond) // past the hold
	fence, st, err := g.Claim(ctx, v.ID, 0)
	if err != nil || !st.Found || st.Remaining != 2 {
		t.Fatalf("claim after the rebuild: %+v %v; want 2 left (the order in the log counted)", st, err)
	}
	out, err = g.Grab(ctx, v.ID, 0, fence, append(first, testenv.Grabs(t, ids, 2, 3, 4)...))
	want := []domain.SeckillCode{"OK", "OK", "OK", "SOLD_OUT"}
	if err != nil || fmt.Sprint(codes(out)) != fmt.Sprint(want) || out.Results[0].OrderID != first[0].OrderID {
		t.Fatalf("after the rebuild: %v %+v %v; want %v, the first request answered with its order %d", codes(out), out.Results, err, want, first[0].OrderID)
	}
}
