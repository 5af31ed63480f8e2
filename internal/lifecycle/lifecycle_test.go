package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"flashsale/internal/lifecycle"
)

// recorder keeps what the services did, in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// service records its start and stop; it fails to start with fail.
func service(r *recorder, name string, fail error) lifecycle.Named {
	return lifecycle.Named{Name: name, Service: lifecycle.Func(
		func(context.Context) error { r.add("start " + name); return fail },
		func() { r.add("stop " + name) })}
}

func TestGroupStartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	cannot := errors.New("c cannot start")
	tests := []struct {
		name     string
		services func(r *recorder) []lifecycle.Named
		wantErr  error
		want     []string
	}{
		{
			name: "all start in order, stop in reverse after the drain",
			services: func(r *recorder) []lifecycle.Named {
				return []lifecycle.Named{service(r, "a", nil), service(r, "b", nil), service(r, "c", nil)}
			},
			want: []string{"start a", "start b", "start c", "drain", "stop c", "stop b", "stop a"},
		},
		{
			name: "a failed start stops it and what started before, in reverse, after the drain, before Start returns; no later one starts",
			services: func(r *recorder) []lifecycle.Named {
				return []lifecycle.Named{service(r, "a", nil), service(r, "b", nil), service(r, "c", cannot), service(r, "d", nil)}
			},
			wantErr: cannot,
			want:    []string{"start a", "start b", "start c", "drain", "stop c", "stop b", "stop a"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{}
			g := lifecycle.NewGroup(tc.services(r)...)
			g.BeforeStop = func() { r.add("drain") }
			err := g.Start(t.Context())
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Start: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil {
				g.Stop()
			}
			if got := r.got(); !slices.Equal(got, tc.want) {
				t.Fatalf("events:\n%q\nwant:\n%q", got, tc.want)
			}
			g.Stop() // a second Stop, or one after a failed start, stops nothing twice
			if got := r.got(); len(got) != len(tc.want) {
				t.Fatalf("events after another Stop:\n%q", got)
			}
		})
	}
}

func TestAFailedStartNamesTheService(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	cannot := errors.New("port in use")
	err := lifecycle.NewGroup(service(r, "listener", nil), service(r, "profiler", cannot)).Start(t.Context())
	var se *lifecycle.StartError
	if !errors.As(err, &se) || se.Name != "profiler" || !errors.Is(err, cannot) {
		t.Fatalf("Start: %v, want a StartError naming profiler and wrapping %v", err, cannot)
	}
	if want := "start profiler: port in use"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

func TestLoopRunsUntilStopAndStopWaitsForIt(t *testing.T) {
	t.Parallel()
	entered, returned := make(chan struct{}), make(chan struct{})
	loop := lifecycle.NewLoop(func(ctx context.Context) {
		close(entered)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a loop that takes a moment to wind down
		close(returned)
	})
	loop.Stop() // before Start: nothing to stop
	ctx, cancel := context.WithCancel(t.Context())
	if err := loop.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-entered
	cancel() // the start's context ending does not end the loop
	select {
	case <-returned:
		t.Fatal("the loop ended with its start's context, before Stop")
	case <-time.After(50 * time.Millisecond):
	}
	loop.Stop()
	select {
	case <-returned:
	default:
		t.Fatal("Stop returned before the loop did")
	}
	loop.Stop() // a second Stop is harmless
}

// A service built at Start is started once built and stopped by Stop; a
// build that fails leaves what it returned to Stop.
func TestBuildStartsWhatItBuilt(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	built := lifecycle.Build(func(context.Context) (lifecycle.Service, error) {
		r.add("build")
		return service(r, "part", nil).Service, nil
	})
	if err := built.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	built.Stop()
	cannot := errors.New("lease in use")
	failed := lifecycle.Build(func(context.Context) (lifecycle.Service, error) {
		r.add("build half")
		return lifecycle.Func(nil, func() { r.add("release half") }), cannot
	})
	if err := failed.Start(t.Context()); !errors.Is(err, cannot) {
		t.Fatalf("Start: %v, want %v", err, cannot)
	}
	failed.Stop()
	want := []string{"build", "start part", "stop part", "build half", "release half"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("events:\n%q\nwant:\n%q", got, want)
	}
}
