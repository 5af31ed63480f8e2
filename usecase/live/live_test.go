package live_test

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/usecase/live"
)

// fakeStock is the stock of one voucher, changed by the test.
type fakeStock struct {
	mu        sync.Mutex
	remaining int
}

func (f *fakeStock) Stock(_ context.Context, id int64) (domain.StockLevel, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return domain.StockLevel{VoucherID: id, Initial: 100, Remaining: f.remaining, At: time.Now()}, nil
}

func (f *fakeStock) set(n int) {
	f.mu.Lock()
	f.remaining = n
	f.mu.Unlock()
}

// loopback is a bus that delivers every announcement to the service at
// once, as the Redis watcher would, and counts them.
type loopback struct {
	svc       *live.Service
	published atomic.Int32
}

func (b *loopback) PublishStock(_ context.Context, ids []int64) error {
	b.published.Add(1)
	for _, id := range ids {
		b.svc.StockChanged(id)
	}
	return nil
}

func newService(tb testing.TB, stock *fakeStock) (*live.Service, *loopback) {
	tb.Helper()
	bus := &loopback{}
	bus.svc = live.New(stock, nil, bus, slog.New(slog.DiscardHandler), live.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { bus.svc.Run(ctx) })
	tb.Cleanup(func() {
		cancel()
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			tb.Error("Run did not return 2 s after its context ended: a loop is stuck")
		}
	})
	return bus.svc, bus
}

// event is one level a subscriber received, and when.
type event struct {
	remaining int
	at        time.Time
}

// subscribe collects a subscription's events on a channel the test reads.
func subscribe(tb testing.TB, ctx context.Context, svc *live.Service) <-chan event {
	tb.Helper()
	out := make(chan event, 1000)
	err := svc.SubscribeStock(ctx, 1, func(l domain.StockLevel) bool {
		out <- event{l.Remaining, time.Now()}
		return true
	}, func() { close(out) })
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// readUntil reads events until one with remaining want, and returns them.
func readUntil(tb testing.TB, events <-chan event, want int, within time.Duration) []event {
	tb.Helper()
	var got []event
	timeout := time.After(within)
	for {
		select {
		case e := <-events:
			got = append(got, e)
			if e.remaining == want {
				return got
			}
		case <-timeout:
			tb.Fatalf("no event with remaining %d within %s; got %v", want, within, got)
		}
	}
}

func TestStockEventsAreCoalescedAndEndOnTheLatest(t *testing.T) {
	t.Parallel()
	stock := &fakeStock{remaining: 40}
	svc, bus := newService(t, stock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	events := subscribe(t, ctx, svc)
	first := <-events
	if first.remaining != 40 || first.at.Sub(start) > 100*time.Millisecond {
		t.Fatalf("first event %+v after %s, want 40 at once", first, first.at.Sub(start))
	}
	// 40 sales over about 800 ms (more on a busy machine: sleeps overrun).
	salesBegan := time.Now()
	for n := 39; n >= 0; n-- {
		stock.set(n)
		svc.Sold(1)
		time.Sleep(20 * time.Millisecond)
	}
	salesSpan := time.Since(salesBegan)
	got := append([]event{first}, readUntil(t, events, 0, 2*time.Second)...)
	span := got[len(got)-1].at.Sub(got[0].at)
	t.Logf("40 changes: %d events over %s, %d announcements", len(got), span, bus.published.Load())
	if limit := int(span/live.StockIntervalDefault) + 2; len(got) > limit || len(got) > 41 {
		t.Fatalf("%d events over %s, want at most %d", len(got), span, limit)
	}
	for i := 1; i < len(got); i++ {
		if gap := got[i].at.Sub(got[i-1].at); gap < live.StockIntervalDefault-20*time.Millisecond {
			t.Fatalf("events %d and %d only %s apart", i-1, i, gap)
		}
	}
	// The node announces its sales coalesced, not once per sale: at most
	// one announcement per PublishInterval of the sales' span, and one
	// each at its start and end (measured, not assumed 800 ms: every sleep
	// of the loop may overrun on a busy machine, and a 4 ms mean overrun
	// made 11 announcements legitimate).
	if p, limit := int(bus.published.Load()), int(salesSpan/live.PublishIntervalDefault)+2; p > limit || p >= 40 {
		t.Fatalf("%d announcements for 40 sales in %s, want at most %d", p, salesSpan, limit)
	}
}

func TestSubscriberThatStopsReadingDelaysNoOne(t *testing.T) {
	t.Parallel()
	stock := &fakeStock{remaining: 11}
	svc, _ := newService(t, stock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The stuck subscriber takes its first event, then its client stops
	// reading: every later send blocks (as gqlgen's write to its socket).
	stuck := make(chan struct{})
	var sent atomic.Int32
	err := svc.SubscribeStock(ctx, 1, func(domain.StockLevel) bool {
		if sent.Add(1) > 1 {
			select {
			case <-stuck:
			case <-ctx.Done():
			}
			return false
		}
		return true
	}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer close(stuck)
	var others []<-chan event
	for range 5 {
		others = append(others, subscribe(t, ctx, svc))
	}
	// One change, to get the stuck subscriber stuck in its second send.
	stock.set(10)
	svc.Sold(1)
	for deadline := time.Now().Add(2 * time.Second); sent.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stuck subscriber never got its second event")
		}
	}
	for n := 9; n >= 0; n-- {
		stock.set(n)
		svc.Sold(1)
		time.Sleep(30 * time.Millisecond)
	}
	changed := time.Now()
	for _, events := range others {
		got := readUntil(t, events, 0, 2*time.Second)
		if late := got[len(got)-1].at.Sub(changed); late > 2*live.StockIntervalDefault {
			t.Fatalf("last event %s after the last change", late)
		}
	}
}

// Not parallel: it counts the process's goroutines.
func TestClosedSubscriptionsReturnTheirGoroutines(t *testing.T) {
	stock := &fakeStock{remaining: 5}
	svc, _ := newService(t, stock)
	baseline := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	for range 200 {
		<-subscribe(t, ctx, svc)
	}
	if held := runtime.NumGoroutine() - baseline; held < 200 {
		t.Fatalf("200 subscriptions hold %d goroutines", held)
	}
	if open, _ := svc.Open(); open != 200 {
		t.Fatalf("%d subscriptions open, want 200", open)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after closing 200 subscriptions, baseline %d", runtime.NumGoroutine(), baseline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if open, _ := svc.Open(); open != 0 {
		t.Fatalf("%d subscriptions open after closing them all", open)
	}
}
