package persistence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// room is a configured waiting room of voucher 1 on its own Redis, with
// stock units left.
func room(t *testing.T, open time.Time, rate, max, stock int) (*persistence.Queue, redis.UniversalClient) {
	t.Helper()
	rdb := testenv.MustRedis(t).Client()
	q := persistence.NewQueue(rdb)
	ctx := t.Context()
	paused := false
	if err := q.Configure(ctx, 1, domain.RoomSettings{Open: open, End: time.Now().Add(time.Hour), Rate: rate, Max: max, Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	_, _, _, _, stockKey := persistence.QueueKeys(1)
	if err := rdb.Set(ctx, stockKey, stock, 0).Err(); err != nil {
		t.Fatal(err)
	}
	return q, rdb
}

func join(t *testing.T, q *persistence.Queue, users ...int64) {
	t.Helper()
	for _, u := range users {
		if _, _, err := q.Join(t.Context(), 1, u); err != nil {
			t.Fatalf("user %d joins: %v", u, err)
		}
	}
}

func rankOf(t *testing.T, q *persistence.Queue, user int64) int {
	t.Helper()
	v, err := q.Place(t.Context(), 1, user)
	if err != nil {
		t.Fatal(err)
	}
	return v.Rank
}

// A user joins once: joining again keeps their place and writes nothing.
// Those who join before the opening stand before every later arrival;
// those after it stand in the order they came.
func TestAQueueKeepsOnePlaceEachEarlyOnesFirstThenByArrival(t *testing.T) {
	t.Parallel()
	q, rdb := room(t, time.Now().Add(time.Hour), 10, 10, 10)
	ctx := t.Context()
	join(t, q, 1, 2, 3, 4, 5)
	if joined, _, err := q.Join(ctx, 1, 3); err != nil || joined {
		t.Fatalf("user 3 joins again: joined %v, %v; want false, nil", joined, err)
	}
	v, err := q.Place(ctx, 1, 3)
	if err != nil || !v.Found || !v.Joined || v.Waiting != 5 || v.Rank < 0 {
		t.Fatalf("place of an early joiner: %+v, %v", v, err)
	}
	if p, ok := domain.PlaceOf(1, v); !ok || p.State != domain.QueueEarly || p.Position != v.Rank+1 {
		t.Fatalf("an early joiner's place: %+v %v", p, ok)
	}
	// The room opens.
	if err := q.Configure(ctx, 1, domain.RoomSettings{Open: time.Now().Add(-time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	join(t, q, 10, 11, 12)
	for i, u := range []int64{10, 11, 12} {
		if r := rankOf(t, q, u); r != 5+i {
			t.Errorf("the %d. later arrival (user %d) stands at rank %d, want %d", i+1, u, r, 5+i)
		}
	}
	_, line, _, _, _ := persistence.QueueKeys(1)
	if n, _ := rdb.ZCard(ctx, line).Result(); n != 8 {
		t.Fatalf("%d in the line, want 8", n)
	}
}

// The pacer admits at most a second's worth at once and then at the
// room's rate, never more open tickets than allowed nor than units left;
// a ticket that expires unused frees its slot for the next in line.
func TestAQueueAdmitsAtItsPaceWithinItsOpenTicketsAndStock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t.Run("pace", func(t *testing.T) {
		t.Parallel()
		q, _ := room(t, time.Now().Add(-time.Hour), 20, 1000, 1000)
		for u := int64(1); u <= 200; u++ {
			join(t, q, u)
		}
		start := time.Now()
		total := 0
		for time.Since(start) < 500*time.Millisecond {
			a, err := q.Admit(ctx, 1, time.Minute, 1000)
			if err != nil {
				t.Fatal(err)
			}
			total += len(a.Users)
			time.Sleep(10 * time.Millisecond)
		}
		// A full bucket (20) and at most 20 a second after it.
		if most := 20 + int(20*time.Since(start).Seconds()) + 1; total > most || total < 20 {
			t.Fatalf("admitted %d in %v at 20 a second, want 20 to %d", total, time.Since(start), most)
		}
	})
	t.Run("open tickets", func(t *testing.T) {
		t.Parallel()
		q, _ := room(t, time.Now().Add(-time.Hour), 1000, 3, 1000)
		join(t, q, 1, 2, 3, 4, 5, 6, 7)
		a, err := q.Admit(ctx, 1, 100*time.Millisecond, 1000)
		if err != nil || len(a.Users) != 3 {
			t.Fatalf("first admission: %d users, %v; want 3 (the open tickets allowed)", len(a.Users), err)
		}
		for i, u := range a.Users {
			if u.UserID != int64(i+1) {
				t.Fatalf("admitted %v, want users 1, 2, 3 in order", a.Users)
			}
		}
		if a, _ = q.Admit(ctx, 1, 100*time.Millisecond, 1000); len(a.Users) != 0 {
			t.Fatalf("admitted %d more with every ticket open, want 0", len(a.Users))
		}
		time.Sleep(150 * time.Millisecond)
		a, err = q.Admit(ctx, 1, 100*time.Millisecond, 1000)
		if err != nil || a.Expired != 3 || len(a.Users) != 3 || a.Users[0].UserID != 4 {
			t.Fatalf("after the tickets expired: %d expired, admitted %v, %v; want 3 expired and users 4, 5, 6", a.Expired, a.Users, err)
		}
		v, _ := q.Place(ctx, 1, 1)
		if p, ok := domain.PlaceOf(1, v); !ok || p.State != domain.QueueClosed {
			t.Fatalf("a user whose ticket expired unused: %+v, want CLOSED", p)
		}
		v, _ = q.Place(ctx, 1, 4)
		if p, ok := domain.PlaceOf(1, v); !ok || p.State != domain.QueueAdmitted || p.ExpiresAt.IsZero() {
			t.Fatalf("an admitted user: %+v, want ADMITTED with its expiry", p)
		}
	})
	t.Run("stock", func(t *testing.T) {
		t.Parallel()
		q, rdb := room(t, time.Now().Add(-time.Hour), 1000, 1000, 2)
		join(t, q, 1, 2, 3)
		if a, err := q.Admit(ctx, 1, time.Minute, 1000); err != nil || len(a.Users) != 2 {
			t.Fatalf("admitted %d with 2 units left, want 2 (%v)", len(a.Users), err)
		}
		// Both buy (the grab script takes the unit and the open ticket):
		// nobody more is admitted; a unit that comes back (a cancel, a
		// restock) admits the next in line.
		_, _, open, _, stock := persistence.QueueKeys(1)
		rdb.Set(ctx, stock, 0, 0)
		rdb.ZRem(ctx, open, "1", "2")
		if a, _ := q.Admit(ctx, 1, time.Minute, 1000); len(a.Users) != 0 {
			t.Fatalf("admitted %v with no unit left", a.Users)
		}
		rdb.Incr(ctx, stock)
		if a, err := q.Admit(ctx, 1, time.Minute, 1000); err != nil || len(a.Users) != 1 || a.Users[0].UserID != 3 {
			t.Fatalf("after a unit came back: admitted %v (%v), want user 3", a.Users, err)
		}
	})
	t.Run("not before the opening", func(t *testing.T) {
		t.Parallel()
		q, _ := room(t, time.Now().Add(time.Hour), 1000, 1000, 1000)
		join(t, q, 1, 2)
		if a, err := q.Admit(ctx, 1, time.Minute, 1000); err != nil || len(a.Users) != 0 {
			t.Fatalf("admitted %d before the opening, want 0 (%v)", len(a.Users), err)
		}
	})
}

// A room whose state another Redis process wrote (a restart from older
// files, a promoted replica that missed some of it) is not trusted: its
// line and admissions are dropped at the next join, which says so, and a
// read shows no place meanwhile. A room Redis lost is missing.
func TestAQueueDropsAStaleRoomAndReportsAMissingOne(t *testing.T) {
	t.Parallel()
	q, rdb := room(t, time.Now().Add(-time.Hour), 10, 10, 10)
	ctx := t.Context()
	join(t, q, 1, 2)
	roomKey, _, _, _, _ := persistence.QueueKeys(1)
	if err := rdb.HSet(ctx, roomKey, "run", "another-server").Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := q.Place(ctx, 1, 1); err != nil || v.Found {
		t.Fatalf("a stale room read: %+v, %v; want not found", v, err)
	}
	joined, reset, err := q.Join(ctx, 1, 3)
	if err != nil || !joined || !reset {
		t.Fatalf("a join into a stale room: joined %v, reset %v, %v; want both, no error", joined, reset, err)
	}
	if v, _ := q.Place(ctx, 1, 1); v.Joined {
		t.Fatal("a place of the stale room survived")
	}
	if r := rankOf(t, q, 3); r != 0 {
		t.Fatalf("the first to join after the reset stands at %d, want 0", r)
	}
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Join(ctx, 1, 4); !errors.Is(err, persistence.ErrRoomMissing) {
		t.Fatalf("a join after a flush: %v, want ErrRoomMissing", err)
	}
	if _, err := q.Admit(ctx, 1, time.Minute, 10); !errors.Is(err, persistence.ErrRoomMissing) {
		t.Fatalf("an admission after a flush: %v, want ErrRoomMissing", err)
	}
}

// Memory: Redis holds a waiting user in at most 200 bytes (their entry
// in the line).
func TestAQueueHoldsAWaitingUserInAtMost200Bytes(t *testing.T) {
	t.Parallel()
	q, rdb := room(t, time.Now().Add(-time.Hour), 10, 10, 10)
	ctx := context.Background()
	const n = 20000
	_, line, _, _, _ := persistence.QueueKeys(1)
	pipe := rdb.Pipeline()
	for u := int64(1); u <= n; u++ {
		// As the join script writes them, without n round trips.
		pipe.ZAdd(ctx, line, redis.Z{Score: float64(1764400000000000 + u), Member: 1000000 + u})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	join(t, q, 42)
	var total int64
	for _, k := range []string{line} {
		b, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		total += b
	}
	per := float64(total) / n
	t.Logf("%.0f bytes a waiting user (%d users)", per, n)
	if per > 200 {
		t.Fatalf("%.0f bytes a waiting user, want at most 200", per)
	}
}

// The early ones stand in a uniformly random order, whatever the order
// they came in: five users join early in the same order in 2,000 rooms,
// and the counts of each user at each rank pass a chi-square test of
// independence (16 degrees of freedom; 46.0 is exceeded by chance once in
// 10,000 runs). Ordered by arrival (the same score for all, or the
// arrival time), every user would keep one rank and the statistic would
// be 40,000.
func TestEarlyJoinersStandInAUniformlyRandomOrder(t *testing.T) {
	t.Parallel()
	rdb := testenv.MustRedis(t).Client()
	q := persistence.NewQueue(rdb)
	ctx := t.Context()
	const users, rooms = 5, 2000
	var counts [users][users]int
	open := time.Now().Add(time.Hour)
	for v := int64(1); v <= rooms; v++ {
		if err := q.Configure(ctx, v, domain.RoomSettings{Open: open, End: open.Add(time.Hour), Rate: 1, Max: 1}); err != nil {
			t.Fatal(err)
		}
		for u := int64(1); u <= users; u++ {
			if _, _, err := q.Join(ctx, v, u); err != nil {
				t.Fatal(err)
			}
		}
		_, line, _, _, _ := persistence.QueueKeys(v)
		order, err := rdb.ZRange(ctx, line, 0, -1).Result()
		if err != nil || len(order) != users {
			t.Fatalf("room %d's line: %v, %v", v, order, err)
		}
		for rank, u := range order {
			id := int(u[0] - '1')
			counts[id][rank]++
		}
	}
	const want = float64(rooms) / users
	chi2 := 0.0
	for u := range counts {
		for r := range counts[u] {
			d := float64(counts[u][r]) - want
			chi2 += d * d / want
		}
	}
	t.Logf("chi-square %.1f over %d rooms: %v", chi2, rooms, counts)
	if chi2 > 46.0 {
		t.Fatalf("the early ones' ranks are not uniform: chi-square %.1f > 46.0 (16 degrees of freedom), counts by user and rank %v", chi2, counts)
	}
}

// With acknowledgements (REDIS_ACK_REPLICAS), a Sentinel failover keeps a
// waiting room: every join and admission answered is on a replica, so the
// promoted one holds the places and admissions, which stay where they
// were (no reset, nobody asked to join again, nobody admitted twice), and
// the line goes on from there. Without acknowledgements a change of
// server drops the room (TestAQueueDropsAStaleRoomAndReportsAMissingOne).
func TestWithAcknowledgementsAFailoverKeepsTheRoom(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Sentinel set")
	}
	set := testenv.MustSentinelSet(t)
	rdb := set.FailoverClient()
	t.Cleanup(func() { _ = rdb.Close() })
	q := persistence.NewQueue(rdb)
	q.Acks = persistence.Acks{Replicas: 1, Timeout: time.Second}
	ctx := t.Context()
	paused := false
	if err := q.Configure(ctx, 1, domain.RoomSettings{Open: time.Now().Add(-time.Hour), End: time.Now().Add(time.Hour), Rate: 1000, Max: 2, Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	_, _, _, _, stockKey := persistence.QueueKeys(1)
	if err := rdb.Set(ctx, stockKey, 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	join(t, q, 1, 2, 3, 4)
	a, err := q.Admit(ctx, 1, time.Minute, 10)
	if err != nil || len(a.Users) != 2 {
		t.Fatalf("admission before the failover: %+v, %v; want users 1 and 2", a, err)
	}
	before := map[int64]domain.RoomView{}
	for u := int64(1); u <= 4; u++ {
		if before[u], err = q.Place(ctx, 1, u); err != nil {
			t.Fatal(err)
		}
	}
	old, err := set.KillPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.WaitPromoted(ctx, old); err != nil {
		t.Fatal(err)
	}
	// The client follows the promotion within a few tries.
	var joined, reset bool
	for try := 0; ; try++ {
		if joined, reset, err = q.Join(ctx, 1, 5); err == nil || try == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || !joined || reset {
		t.Fatalf("a join after the failover: joined %v, reset %v, %v; want joined, no reset", joined, reset, err)
	}
	for u := int64(1); u <= 4; u++ {
		v, err := q.Place(ctx, 1, u)
		switch {
		case err != nil:
			t.Fatal(err)
		case !v.Found || !v.Joined:
			t.Fatalf("user %d has no place after the failover: %+v", u, v)
		case v.Rank != before[u].Rank || !v.Expiry.Equal(before[u].Expiry):
			t.Fatalf("user %d after the failover: rank %d, admitted until %v; before it %d, %v", u, v.Rank, v.Expiry, before[u].Rank, before[u].Expiry)
		}
	}
	if a, err := q.Admit(ctx, 1, time.Minute, 10); err != nil || a.Reset || len(a.Users) != 0 {
		t.Fatalf("an admission after the failover with both tickets open: %+v, %v; want nobody, no reset", a, err)
	}
}

// With acknowledgements an admission is shown only once the replicas hold
// it: here the replica is stopped (SIGSTOP: connected, but acknowledging
// nothing) when another node's pacer admits, whose answer says the
// admission was not acknowledged, yet the primary ran it. A read of the
// place then fails rather than hand out a ticket that a failover to the
// replica would take back (and admit the place again), though the
// replica had acknowledged everything the reading connection wrote (the
// join); once the replica runs again, the read shows the admission.
func TestAnAdmissionTheReplicasDoNotHoldIsNotShown(t *testing.T) {
	t.Parallel()
	primary := testenv.MustRedis(t)
	replica := testenv.MustReplica(t, primary)
	rdb := primary.Client()
	q := persistence.NewQueue(rdb)
	// Time enough for a fresh replica's first acknowledgement on a loaded
	// machine (200 ms once was not).
	q.Acks = persistence.Acks{Replicas: 1, Timeout: 2 * time.Second}
	ctx := t.Context()
	paused := false
	if err := q.Configure(ctx, 1, domain.RoomSettings{Open: time.Now().Add(-time.Hour), End: time.Now().Add(time.Hour), Rate: 1000, Max: 10, Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	_, _, _, _, stockKey := persistence.QueueKeys(1)
	if err := rdb.Set(ctx, stockKey, 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	join(t, q, 1)
	replica.Pause()
	defer replica.Continue()
	// The pacer is another node: its admission's write is not on the
	// connection the place is read from.
	pacer := persistence.NewQueue(primary.Client())
	pacer.Acks = q.Acks
	if a, err := pacer.Admit(ctx, 1, time.Minute, 10); !errors.Is(err, persistence.ErrNotAcknowledged) || len(a.Users) != 1 {
		t.Fatalf("admission with the replica stopped: %+v, %v; want user 1 admitted on the primary alone", a, err)
	}
	if v, err := q.Place(ctx, 1, 1); err == nil {
		t.Fatalf("the place read before the replicas hold the admission: %+v, want an error (expiry %v shown)", v, v.Expiry)
	}
	replica.Continue()
	testenv.WaitFor(t, "the place to show the admission once the replica runs", func() bool {
		v, err := q.Place(ctx, 1, 1)
		return err == nil && !v.Expiry.IsZero()
	})
}
