package persistence_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
)

// pauseAfterFinished holds a prune right after it has found a voucher's
// order log finished, before it unregisters the log, until the test
// releases it: the moment at which another node may bring the log back to
// life.
type pauseAfterFinished struct {
	meta, log string
	fired     atomic.Bool
	checked   chan struct{} // closed when the writer is held
	release   chan struct{} // closed by the test to let it go on
}

func newPauseAfterFinished(voucherID int64) *pauseAfterFinished {
	return &pauseAfterFinished{
		meta: fmt.Sprintf("{v%d}:meta", voucherID), log: persistence.LogKey(voucherID),
		checked: make(chan struct{}), release: make(chan struct{}),
	}
}

func (p *pauseAfterFinished) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pauseAfterFinished) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c, ok := cmd.(*redis.Cmd)
		if !ok || err != nil || !p.isFinishedCheck(cmd.Args()) {
			return err
		}
		if n, _ := c.Int(); n != 1 || !p.fired.CompareAndSwap(false, true) {
			return err
		}
		close(p.checked)
		select {
		case <-p.release:
		case <-ctx.Done():
		case <-time.After(20 * time.Second): // the test failed; never hang the prune
		}
		return err
	}
}

// isFinishedCheck recognises the prune's check of this voucher: a script
// whose two keys are the voucher's metadata and its order log.
func (p *pauseAfterFinished) isFinishedCheck(args []any) bool {
	if len(args) != 5 || (args[0] != "evalsha" && args[0] != "eval") {
		return false
	}
	return fmt.Sprint(args[2]) == "2" && args[3] == p.meta && args[4] == p.log
}

func (p *pauseAfterFinished) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestPruneKeepsALogThatCameBackToLife: the order log's prune finds a log
// finished (its voucher was unloaded from Redis and the log is empty), and
// before it unregisters the log the voucher is preheated again and sells.
// The log must stay registered and its orders must reach the database;
// unregistered, no writer would read them until a restart, and
// WaitDrained would report drained at once.
func TestPruneKeepsALogThatCameBackToLife(t *testing.T) {
	t.Parallel()
	db, srv := testenv.MustPostgres(t), testenv.MustRedis(t)
	rdb := srv.Client()
	ctx := t.Context()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 100, Limit: 1})
	// Unloaded, as a load whose stamp the database did not record is: the
	// voucher is gone from Redis and its log is empty, so the log counts
	// as finished.
	life, err := rdb.HGet(ctx, fmt.Sprintf("{v%d}:meta", v.ID), "life").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := persistence.NewStock(rdb).Unload(ctx, v.ID, life); err != nil {
		t.Fatal(err)
	}

	pause := newPauseAfterFinished(v.ID)
	wrdb := srv.Client()
	wrdb.AddHook(pause)
	logs, err := persistence.NewOrderLogs(rdb).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pruned := make(chan int, 1)
	go func() { pruned <- orderStore(db, wrdb).Prune(ctx, logs) }()
	select {
	case <-pause.checked:
	case n := <-pruned:
		t.Fatalf("the prune never found the log finished (%d dropped); the test proves nothing", n)
	case <-time.After(10 * time.Second):
		t.Fatal("the prune never found the log finished; the test proves nothing")
	}
	// Between the check and the unregistering: another node preheats the
	// voucher again (which registers its log) and sells from it.
	if found, err := catalog.New(persistence.NewVouchers(db), persistence.NewStock(rdb), quiet).EnsurePreheated(ctx, v.ID); err != nil || !found {
		t.Fatalf("preheat again: found %v, %v", found, err)
	}
	sold := testenv.Sell(t, db, rdb, v.ID, testenv.Users(1, 5))
	close(pause.release)
	if n := <-pruned; n != 0 {
		t.Errorf("the prune dropped %d logs, want none", n)
	}

	drainOrders(t, db, rdb)
	if ok, err := rdb.SIsMember(ctx, "flashsale:order-logs", persistence.LogKey(v.ID)).Result(); err != nil || !ok {
		t.Errorf("the log of a selling voucher is unregistered (%v)", err)
	}
	testenv.AssertPersisted(t, db, v, sold)
}
