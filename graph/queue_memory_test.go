package graph_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/internal/auth"
)

// A node holds nothing per user who waits: the line is Redis's. Its live
// heap with a room of 500 waiting and with the same room of 20,500, after
// the 20,000 joined through its API, were read where they stand and were
// paced for a second, differs by less than 256 KiB (13 bytes a user; a
// map of the joined users' ids alone takes about 40). Not parallel, so
// that no other test's heap is counted; without -race (scripts/test.sh
// runs it beside the race run), whose shadow memory would count.
func TestANodeHoldsNoMemoryPerWaitingUser(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations would count; scripts/test.sh runs this without it")
	}
	if testing.Short() {
		t.Skip("20,000 joins")
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
					var out struct{ JoinQueue placeData }
					if errs := s.do(t, s.token(t, u, auth.RoleUser), joinQueueMutation, map[string]any{"id": v.ID}, &out); len(errs) > 0 {
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

	join(1000, 1500)
	before := settle()
	join(1500, 21500)
	after := settle()
	if p := s.queuePlace(t, 21499, v.ID); p == nil || p.State != "WAITING" || p.Position == nil || *p.Position < 20000 {
		t.Fatalf("the last to join: %+v, want WAITING behind 20,000", p)
	}
	grew := int64(after) - int64(before)
	t.Logf("live heap %d KiB with 500 waiting, %d KiB with 20,500 (%+d bytes a user)", before>>10, after>>10, grew/20000)
	if grew > 256<<10 {
		t.Fatalf("the node's heap grew by %d KiB with 20,000 more waiting (%d bytes a user), want under 256 KiB: something keeps a record per user", grew>>10, grew/20000)
	}
}
