package actors_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/persistence"
)

// An actor whose handler panics (here: every sale's notice panics, as a
// node's did while its live stock was not built yet) is replaced by a new
// activation, never restarted by protoactor on its old state: protoactor
// restarted it ten times in ten seconds and then stopped it while the
// router kept sending it grabs, so every later grab of the segment waited
// out its deadline and answered UNAVAILABLE, for minutes.
func TestAPanickingActorIsReplacedNotRestarted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 40, 1)
	r := e.router(t, nil, actors.Options{
		GrabTimeout: time.Second,
		Sold:        func(int64) { panic("live stock is not built yet") },
	})
	for u := int64(1); u <= 30; u++ {
		mustSell(t, r, id, u)
	}
	if left, err := e.rdb.Get(t.Context(), "{v"+strconv.FormatInt(id, 10)+"}:stock").Int(); err != nil || left != 10 {
		t.Fatalf("%d units left in Redis (%v), want 10", left, err)
	}
}

// panickyState is a red packet's Redis side whose State panics its first
// panics times: so does each red-packet actor's start meanwhile.
type panickyState struct {
	*persistence.RedPacketRedis
	panics atomic.Int64
}

func (s *panickyState) State(ctx context.Context, id int64) (domain.RedPacketState, error) {
	if s.panics.Add(-1) >= 0 {
		panic("state read panicked")
	}
	return s.RedPacketRedis.State(ctx, id)
}

// A red-packet actor whose start panics leaves the map, hands the grabs
// it holds to a new actor (at most 3 times a grab) and stops: a grab is
// answered OK, or UNAVAILABLE while starts panic, never from what a
// panic left (an actor that stopped without handing them on answered
// NOT_FOUND from its empty state); once starts stop panicking, it sells.
func TestAPanickingRedPacketActorIsReplacedNotRestarted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router(t, nil, actors.Options{GrabTimeout: time.Second})
	rds := persistence.NewRedPacketRedis(e.rdb)
	store := persistence.NewRedPacketStore(e.db, rds)
	amounts := make([]int64, 20)
	for i := range amounts {
		amounts[i] = 1
	}
	now := time.Now()
	rp := domain.RedPacket{ID: now.UnixNano(), CreatorID: 1, TotalCents: 20, Count: 20, ExpiresAt: now.Add(time.Hour), CreatedAt: now}
	if err := store.Create(t.Context(), rp, amounts); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Load(t.Context(), rp.ID); err != nil { // into Redis: no start ever loads it here
		t.Fatal(err)
	}
	state := &panickyState{RedPacketRedis: rds}
	state.panics.Store(30)
	p := r.RedPackets(state, store)
	sold := 0
	for u := int64(1); u <= 18; u++ {
		switch res := p.Grab(t.Context(), rp.ID, u, ""); res.Code {
		case domain.RedPacketOK:
			sold++
		case domain.RedPacketUnavailable:
			if sold > 0 {
				t.Fatalf("user %d: UNAVAILABLE after the red packet sold again", u)
			}
		default:
			t.Fatalf("user %d: %s, want OK or UNAVAILABLE", u, res.Code)
		}
	}
	if sold < 10 {
		t.Fatalf("%d of 18 grabs sold, want the last 10 at least", sold)
	}
}
