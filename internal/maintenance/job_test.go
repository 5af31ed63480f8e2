package maintenance_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/internal/maintenance"
)

var quiet = slog.New(slog.DiscardHandler)

// fakeLocker stands for the cluster's lease: held says whether another
// node holds it; names records the leases asked for.
type fakeLocker struct {
	held  atomic.Bool
	asked atomic.Value // string: the last lease name asked for
}

func (l *fakeLocker) Do(ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error) {
	l.asked.Store(name)
	if l.held.Load() {
		return false, nil
	}
	return true, fn(ctx)
}

// next waits for the job's next run, failing the test after a while.
func next[R any](tb testing.TB, runs <-chan maintenance.Run[R]) maintenance.Run[R] {
	tb.Helper()
	select {
	case r := <-runs:
		return r
	case <-time.After(10 * time.Second):
		tb.Fatal("no run of the job within 10s")
		return maintenance.Run[R]{}
	}
}

func TestJobReportsWhatEachRunDid(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	job := maintenance.New(maintenance.Config{Name: "count", Interval: time.Millisecond}, quiet,
		func(context.Context) (int, error) { return int(calls.Add(1)), nil })
	runs := job.TestSignals()
	if err := job.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	for want := 1; want <= 3; want++ {
		if r := next(t, runs); !r.Ran || r.Err != nil || r.Result != want {
			t.Fatalf("run %d reported %+v, want ran with result %d", want, r, want)
		}
	}
}

func TestJobRunsOnlyUnderItsLease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		held    bool
		wantRan bool
	}{
		{"runs when the lease is free", false, true},
		{"skips the run when another node holds the lease", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			locker := &fakeLocker{}
			locker.held.Store(tc.held)
			var calls atomic.Int64
			job := maintenance.New(maintenance.Config{Name: "leased", Interval: time.Millisecond, Locker: locker}, quiet,
				func(context.Context) (int, error) { calls.Add(1); return 7, nil })
			runs := job.TestSignals()
			if err := job.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			r := next(t, runs)
			job.Stop()
			if r.Ran != tc.wantRan {
				t.Fatalf("run reported ran=%v, want %v", r.Ran, tc.wantRan)
			}
			if got := locker.asked.Load(); got != "leased" {
				t.Fatalf("lease asked for: %v, want the job's name", got)
			}
			if tc.wantRan && r.Result != 7 || !tc.wantRan && (calls.Load() != 0 || r.Result != 0) {
				t.Fatalf("result %d after %d calls of the run, with the lease held=%v", r.Result, calls.Load(), tc.held)
			}
		})
	}
}

// A run that is under way when the job stops sees its context end, and
// Stop returns only once it has returned.
func TestJobStopWaitsForTheRunUnderWay(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	var returned atomic.Bool
	job := maintenance.New(maintenance.Config{Name: "slow"}, quiet, func(ctx context.Context) (int, error) {
		close(entered)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a run that takes a moment to wind down
		returned.Store(true)
		return 0, ctx.Err()
	})
	if err := job.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-entered
	job.Stop()
	if !returned.Load() {
		t.Fatal("Stop returned before the run under way did")
	}
	select {
	case <-job.Stopped():
	default:
		t.Fatal("Stopped is not closed after Stop")
	}
	job.Stop() // a second Stop is harmless
}

func TestJobStartsOnce(t *testing.T) {
	t.Parallel()
	job := maintenance.New(maintenance.Config{Name: "once"}, quiet, func(context.Context) (int, error) { return 0, nil })
	job.Stop() // before Start: nothing to stop
	if err := job.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	if err := job.Start(context.Background()); err == nil {
		t.Fatal("a second Start was accepted")
	}
}

// A failed run is reported and the job keeps running: the next run
// succeeds.
func TestJobRetriesAfterAFailedRun(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	boom := errors.New("store down")
	job := maintenance.New(maintenance.Config{Name: "flaky", Interval: time.Millisecond}, quiet, func(context.Context) (int, error) {
		if calls.Add(1) == 1 {
			return 0, boom
		}
		return 1, nil
	})
	runs := job.TestSignals()
	if err := job.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	if r := next(t, runs); !errors.Is(r.Err, boom) {
		t.Fatalf("first run reported %v, want the store's error", r.Err)
	}
	if r := next(t, runs); r.Err != nil || r.Result != 1 {
		t.Fatalf("second run reported %+v, want success", r)
	}
}

// A job that waits for its first interval does not run at Start; the
// run's timeout bounds a run that would otherwise hang.
func TestJobFirstRunAndTimeout(t *testing.T) {
	t.Parallel()
	started := time.Now()
	job := maintenance.New(maintenance.Config{Name: "late", Interval: 50 * time.Millisecond, Timeout: 10 * time.Millisecond, FirstAfterInterval: true}, quiet,
		func(ctx context.Context) (time.Duration, error) {
			<-ctx.Done()
			return time.Since(started), ctx.Err()
		})
	runs := job.TestSignals()
	if err := job.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	r := next(t, runs)
	if r.Result < 50*time.Millisecond {
		t.Fatalf("first run ended %v after Start, before the first interval", r.Result)
	}
	if !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("a run past its timeout reported %v, want the deadline", r.Err)
	}
}
