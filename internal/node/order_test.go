package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
)

// The node stops in the reverse of its start order, each step after its
// own loops have ended; a step that fails stops the start, and what
// started, the failed step included (it may hold what it acquired before
// failing), is stopped; a later step never starts.
func TestStepsStopInReverseAfterTheirLoops(t *testing.T) {
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	withLoop := func(name string) step {
		return step{
			name: name,
			start: func(_ context.Context, bg *loops) error {
				record("start " + name)
				bg.Go(func(ctx context.Context) {
					<-ctx.Done()
					record("loop of " + name + " ended")
				})
				return nil
			},
			stop: func() { record("stop " + name) },
		}
	}
	failing := step{
		name:  "c",
		start: func(context.Context, *loops) error { record("start c"); return errors.New("c cannot start") },
		stop:  func() { record("stop c") },
	}
	never := step{
		name:  "d",
		start: func(context.Context, *loops) error { record("start d"); return nil },
		stop:  func() { record("stop d") },
	}

	a := &app{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := a.begin(t.Context(), []step{withLoop("a"), withLoop("b"), failing, never}); err == nil {
		t.Fatal("begin succeeded past a failing step")
	}
	a.end()
	a.end() // a second end stops nothing twice
	want := []string{
		"start a", "start b", "start c",
		"stop c",
		"loop of b ended", "stop b",
		"loop of a ended", "stop a",
	}
	if !slices.Equal(events, want) {
		t.Fatalf("events:\n%q\nwant:\n%q", events, want)
	}
}

// A cluster member is sent grabs by the others the moment it joins, so it
// joins after every step a grab reaches (a member that joined with the
// router sold before its live stock was built, and each sale's notice
// panicked), and after its port is bound; the router tells live stock of
// its sales, so live stock is built before it.
func TestAClusterMemberJoinsOnceEverythingAGrabReachesIsBuilt(t *testing.T) {
	a := &app{}
	var names []string
	for _, s := range a.order() {
		names = append(names, s.name)
	}
	at := func(name string) int {
		i := slices.Index(names, name)
		if i < 0 {
			t.Fatalf("no step %q in %q", name, names)
		}
		return i
	}
	join := at("cluster")
	for _, before := range []string{"router", "order writer", "voucher events", "orders", "red packets", "live", "gate", "graphql", "listener"} {
		if at(before) > join {
			t.Errorf("step %q starts after the cluster join: %q", before, names)
		}
	}
	if at("live") > at("router") {
		t.Errorf("live stock is built after the router that tells it its sales: %q", names)
	}
}
