package graph_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A node holds nothing per user who waits: the line is Redis's. Its live
// heap with a room of 2,000 waiting (joined as the rest will be, so that
// its pools of connections have grown to the load) and with the same room
// of 82,000, after the 80,000 joined through its API, were read where
// they stand and were paced for a second, differs by less than 1 MiB
// (13 bytes a user: one more pooled connection is about 200 KiB, and
// beside the race run the pools grew by 570 KiB;
// a map of the joined users' ids alone takes about 36 bytes a user). Not
// parallel, so that no other test's heap is counted; without -race
// (scripts/test.sh runs it beside the race run), whose shadow memory
// would count.
func TestANodeHoldsNoMemoryPerWaitingUser(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations would count; scripts/test.sh runs this without it")
	}
	if testing.Short() {
		t.Skip("82,000 joins")
	}
	s := newServer(t)
	// One unit and one open ticket at a time: the line stays whole.
	v := s.createVoucher(t, roomInput(1, 1, 1))

	join := func(from, to int64) {
		t.Helper()
		var next atomic.Int64
		next.Store(from)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for u := next.Add(1) - 1; u < to && !t.Failed(); u = next.Add(1) - 1 {
					if _, errs := s.joinUntil(t, u, v.ID, time.Now().Add(time.Second)); len(errs) > 0 {
						t.Errorf("user %d joins: %v", u, errs)
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	settle := func() uint64 {
		// The pacer runs every 100 ms over the whole room; a deep place is
		// read where it stands.
		time.Sleep(time.Second)
		if p := s.queuePlace(t, 1000, v.ID); p == nil || p.Waiting < 100 {
			t.Fatalf("a waiting user's place: %+v", p)
		}
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}

	const more = 80000
	join(1000, 3000)
	before := settle()
	join(3000, 3000+more)
	after := settle()
	if p := s.queuePlace(t, 3000+more-1, v.ID); p == nil || p.State != "WAITING" || p.Position == nil || *p.Position < more {
		t.Fatalf("the last to join: %+v, want WAITING behind %d", p, more)
	}
	grew := int64(after) - int64(before)
	t.Logf("live heap %d KiB with 2,000 waiting, %d KiB with %d (%+d bytes a user)", before>>10, after>>10, 2000+more, grew/more)
	if grew > 1<<20 {
		t.Fatalf("the node's heap grew by %d KiB with %d more waiting (%d bytes a user), want under 1 MiB: something keeps a record per user", grew>>10, more, grew/more)
	}
}
