package httpapi

import (
	"context"
	"testing"
	"time"

	"flashsale/testkit/testenv"
)

// The rate hands out start times 1/rate apart: after a quiet spell a
// burst of InFlight starts at once, then each request is given the next
// start if it is within the wait, and refused (nothing taken) if not.
func TestAnonymousRateReservesStartsWithinTheWait(t *testing.T) {
	if newAnonymousBudget(AnonymousBudget{}) != nil {
		t.Fatal("the zero budget must be off")
	}
	b := newAnonymousBudget(AnonymousBudget{InFlight: 2, PerSecond: 10, Wait: 250 * time.Millisecond})
	now := time.Unix(1000, 0)
	for i, want := range []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, -1, -1} {
		if got := b.reserve(now, b.wait, 1); got != want {
			t.Fatalf("request %d: start in %v, want %v", i, got, want)
		}
	}
	now = now.Add(100 * time.Millisecond)
	if got := b.reserve(now, b.wait, 1); got != 200*time.Millisecond {
		t.Fatalf("100ms later: start in %v, want 200ms (the refused ones took nothing)", got)
	}
	now = now.Add(time.Hour)
	for i := range 2 {
		if got := b.reserve(now, 0, 1); got != 0 {
			t.Fatalf("after a quiet hour, request %d of the burst: start in %v, want now", i, got)
		}
	}
	if got := b.reserve(now, 0, 1); got != -1 {
		t.Fatalf("past the burst with no wait: %v, want refused", got)
	}
}

// A large body takes a start per 8 KiB (anonymousWeight): a 60 KB
// document takes 8 of the rate's starts, so the next request starts that
// much later, and the rate bounds the work, not only the count.
func TestAnonymousRateWeighsALargeBody(t *testing.T) {
	if w := anonymousWeight(60 << 10); w != 8 {
		t.Fatalf("a 60 KiB body weighs %d starts, want 8", w)
	}
	if w := anonymousWeight(-1); w != 1 {
		t.Fatalf("an unknown length weighs %d, want 1", w)
	}
	b := newAnonymousBudget(AnonymousBudget{InFlight: 1, PerSecond: 100, Wait: time.Second})
	now := time.Unix(1000, 0)
	if got := b.reserve(now, b.wait, anonymousWeight(60<<10)); got != 0 {
		t.Fatalf("the large one: start in %v, want now", got)
	}
	if got := b.reserve(now, b.wait, 1); got != 80*time.Millisecond {
		t.Fatalf("the next: start in %v, want 80ms (8 starts of 10ms)", got)
	}
}

// With every slot taken, a request waits for one (using no slot while it
// waits) and is admitted when one is released; one more than the waiting
// bound, and one whose client leaves, are not admitted and leave nothing
// behind.
func TestAnonymousSlotsQueueUpToTheirBound(t *testing.T) {
	b := newAnonymousBudget(AnonymousBudget{InFlight: 1, Wait: time.Hour})
	b.maxWaiting = 1
	ctx := context.Background()
	release, _, ok := b.admit(ctx, 1)
	if !ok {
		t.Fatal("the first request refused")
	}
	admitted := make(chan func(), 1)
	go func() {
		r, _, ok := b.admit(ctx, 1)
		if !ok {
			r = nil
		}
		admitted <- r
	}()
	testenv.WaitFor(t, "one request waits for the budget", func() bool { return b.waiting.Load() == 1 })

	over, cancelOver := context.WithCancel(ctx)
	defer cancelOver()
	refused := make(chan time.Duration, 1)
	go func() {
		if r, retry, ok := b.admit(over, 1); ok {
			r()
			refused <- -1
		} else {
			refused <- retry
		}
	}()
	testenv.WaitFor(t, "the request past the waiting bound is answered or waits", func() bool { return len(refused) == 1 || b.waiting.Load() > 1 })
	if n := b.waiting.Load(); n > 1 {
		t.Fatalf("%d waiting: one past the waiting bound waits instead of being refused at once", n)
	}
	if retry := <-refused; retry < time.Second {
		t.Fatalf("past the waiting bound: retry after %v; want refused, retry after a second or more", retry)
	}
	release()
	second := <-admitted
	if second == nil {
		t.Fatal("the waiting request was not admitted when the slot was released")
	}

	gone, cancel := context.WithCancel(ctx)
	left := make(chan bool, 1)
	go func() { _, _, ok := b.admit(gone, 1); left <- ok }()
	testenv.WaitFor(t, "the request whose client leaves waits for the budget", func() bool { return b.waiting.Load() == 1 })
	cancel()
	if <-left {
		t.Fatal("a request whose client left was admitted")
	}
	if n := b.waiting.Load(); n != 0 {
		t.Fatalf("%d left waiting", n)
	}
	second()
	if r, _, ok := b.admit(ctx, 1); !ok {
		t.Fatal("the slot was not given back")
	} else {
		r()
	}
}
