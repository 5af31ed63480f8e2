package actors_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// redPackets starts a router's red-packet sequencer on its own client,
// whose commands cnt counts, and creates a red packet of the amounts.
func (e *env) redPackets(tb testing.TB, cnt *testenv.Counter, amounts []int64, ttl time.Duration) (*actors.RedPackets, int64) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	rdb.AddHook(cnt)
	tb.Cleanup(func() { _ = rdb.Close() })
	r := e.router(tb, nil, actors.Options{})
	rds := persistence.NewRedPacketRedis(rdb)
	store := persistence.NewRedPacketStore(e.db, rds)
	var total int64
	for _, a := range amounts {
		total += a
	}
	now := time.Now()
	rp := domain.RedPacket{ID: now.UnixNano(), CreatorID: 1, TotalCents: total, Count: len(amounts), ExpiresAt: now.Add(ttl), CreatedAt: now}
	if err := store.Create(context.Background(), rp, amounts); err != nil {
		tb.Fatal(err)
	}
	return r.RedPackets(rds, store), rp.ID
}

// TestEmptyRedPacketIsAnsweredWithoutRedis: once a batch told the actor
// the red packet is empty, grabs without a key are answered EMPTY from
// memory, and a keyed one still reaches the script (it may be a retry of
// a grab that took a packet).
func TestEmptyRedPacketIsAnsweredWithoutRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var cnt testenv.Counter
	p, id := e.redPackets(t, &cnt, []int64{3, 2, 1}, time.Hour)
	for u := int64(1); u <= 3; u++ {
		if res := p.Grab(t.Context(), id, u, ""); res.Code != domain.RedPacketOK {
			t.Fatalf("user %d: %+v", u, res)
		}
	}
	if res := p.Grab(t.Context(), id, 4, ""); res.Code != domain.RedPacketEmpty {
		t.Fatalf("user 4: %+v, want EMPTY", res)
	}
	before := cnt.Commands.Load()
	var wg sync.WaitGroup
	for u := int64(100); u < 1100; u++ {
		wg.Go(func() {
			if res := p.Grab(context.Background(), id, u, ""); res.Code != domain.RedPacketEmpty {
				t.Errorf("user %d: %+v, want EMPTY", u, res)
			}
		})
	}
	wg.Wait()
	if calls := cnt.Commands.Load() - before; calls != 0 {
		t.Fatalf("1000 grabs of an empty red packet made %d Redis calls, want 0", calls)
	}
	if res := p.Grab(t.Context(), id, 1, "k"); res.Code != domain.RedPacketAlreadyGrabbed || res.AmountCents != 3 {
		t.Fatalf("keyed grab of user 1: %+v, want ALREADY_GRABBED with 3", res)
	}
	if cnt.Commands.Load() == before {
		t.Fatal("a keyed grab was answered from memory")
	}
}

// TestRedPacketSurvivesRedisLosingItsData: Redis restarts empty mid-sale;
// the actor loads the red packet again from the database (packets not
// persisted as grabbed, users who grabbed) and goes on.
func TestRedPacketSurvivesRedisLosingItsData(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var cnt testenv.Counter
	p, id := e.redPackets(t, &cnt, []int64{4, 3, 2, 1}, time.Hour)
	w := persistence.NewRedPacketWriter(e.db, e.rdb, quiet, persistence.LogConsumerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if res := p.Grab(t.Context(), id, 1, ""); res.Code != domain.RedPacketOK || res.AmountCents != 4 {
		t.Fatalf("user 1: %+v", res)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := w.WaitDrained(wctx); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.FlushDB(t.Context()).Err(); err != nil { // the test's own redis-server
		t.Fatal(err)
	}
	if res := p.Grab(t.Context(), id, 1, ""); res.Code != domain.RedPacketAlreadyGrabbed || res.AmountCents != 4 {
		t.Fatalf("user 1 after the loss: %+v, want ALREADY_GRABBED with 4", res)
	}
	if res := p.Grab(t.Context(), id, 2, ""); res.Code != domain.RedPacketOK || res.AmountCents != 3 {
		t.Fatalf("user 2 after the loss: %+v, want OK with 3", res)
	}
}
