// Package maintenance is the one shape of the node's background jobs (the
// pay timeout, the pending-stock sweeper, reconciliation, red-packet
// refunds and pruning, the voucher status sync): a Config with defaults, a
// run that returns what it did, an optional cluster-wide lease, and
// Start/Stop.
//
// The rules of each job stay with its use case (orders, redpackets,
// catalog), which hands its run to New; this package only decides when a
// run happens, on which node, and how the job stops. Adding a job is a
// run function and one line in the node's list of services.
package maintenance

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"flashsale/internal/lifecycle"
)

// Locker runs work under a cluster-wide lease (lease.Redlock): ran is
// false when another node holds it.
type Locker interface {
	Do(ctx context.Context, name string, fn func(ctx context.Context) error) (ran bool, err error)
}

// Every Job is a service the node starts in order and stops in reverse.
var _ lifecycle.Service = (*Job[int])(nil)

// IntervalDefault is the time between runs of a job whose Config says
// none.
const IntervalDefault = time.Second

// Config describes a job; zero values take the defaults.
type Config struct {
	// Name names the job in logs and, with a Locker, its lease.
	Name string
	// Interval is the time between the start of two runs (a run longer
	// than that is followed by the next at once): IntervalDefault when 0.
	Interval time.Duration
	// Timeout bounds one run, so that a stalled store delays the next run
	// rather than stopping the job; 0: a run is bounded by its lease only.
	Timeout time.Duration
	// Locker, when set, runs each run under the lease Name: one node at a
	// time, and a run whose lease is lost sees its context end. Nil: the
	// job runs on every node.
	Locker Locker
	// FirstAfterInterval waits one interval before the first run, for a
	// job whose first run at start would find nothing to do.
	FirstAfterInterval bool
}

// Run is the outcome of one run, as the test signals report it.
type Run[R any] struct {
	// Result is what the run did (its zero value when it did not run).
	Result R
	// Ran is false when another node held the lease.
	Ran bool
	Err error
}

// Job runs a function every interval, under a lease when it has a
// Locker, from Start until Stop.
type Job[R any] struct {
	cfg     Config
	log     *slog.Logger
	runOnce func(ctx context.Context) (R, error)
	loop    *lifecycle.Loop

	mu      sync.Mutex
	started bool
	stopped chan struct{}
	runs    chan Run[R] // nil unless a test asked for the signals
}

// New returns a job that calls runOnce every cfg.Interval; runOnce
// returns what it did, for the log and the tests.
func New[R any](cfg Config, log *slog.Logger, runOnce func(ctx context.Context) (R, error)) *Job[R] {
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	j := &Job[R]{cfg: cfg, log: log, runOnce: runOnce, stopped: make(chan struct{})}
	j.loop = lifecycle.NewLoop(j.run)
	return j
}

// Name is the job's name (its lease's, when it has one).
func (j *Job[R]) Name() string { return j.cfg.Name }

// Interval is the time between two runs, defaults applied.
func (j *Job[R]) Interval() time.Duration { return j.cfg.Interval }

// errStarted is returned by a second Start: a job runs once.
var errStarted = errors.New("maintenance job started already")

// Start runs the job in a goroutine of its own until Stop (ctx's values
// reach its runs, its cancellation does not). A job starts once.
func (j *Job[R]) Start(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.started {
		return errStarted
	}
	j.started = true
	return j.loop.Start(ctx)
}

// Stop ends the job and waits for its run under way (whose context ends)
// to return. It is safe before Start and to repeat.
func (j *Job[R]) Stop() { j.loop.Stop() }

// Stopped is closed once a started job has stopped.
func (j *Job[R]) Stopped() <-chan struct{} { return j.stopped }

// TestSignals returns a channel that receives every run's outcome, so a
// test waits for runs rather than sleeping. Call it before Start; the
// job blocks on a signal nobody reads, so read them all until Stop.
func (j *Job[R]) TestSignals() <-chan Run[R] {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.runs == nil {
		j.runs = make(chan Run[R])
	}
	return j.runs
}

func (j *Job[R]) run(ctx context.Context) {
	defer close(j.stopped)
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	j.mu.Lock()
	runs := j.runs
	j.mu.Unlock()
	wait := j.cfg.FirstAfterInterval
	failing := false
	for {
		if wait {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		wait = true
		run := j.once(ctx)
		if ctx.Err() != nil && run.Err != nil {
			return // stopped during the run: its error is the stop's
		}
		// The first failure of a streak is logged, and the recovery: a
		// store that is down fails every run, and one line says so.
		switch {
		case run.Err != nil && !failing:
			failing = true
			j.log.WarnContext(ctx, "maintenance run failed; retried every interval", "job", j.cfg.Name, "interval", j.cfg.Interval, "err", run.Err)
		case run.Err == nil && failing:
			failing = false
			j.log.InfoContext(ctx, "maintenance runs work again", "job", j.cfg.Name)
		}
		if runs != nil {
			select {
			case runs <- run:
			case <-ctx.Done():
				return
			}
		}
	}
}

// once is one run, under the lease when the job has one.
func (j *Job[R]) once(ctx context.Context) Run[R] {
	if j.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, j.cfg.Timeout)
		defer cancel()
	}
	if j.cfg.Locker == nil {
		r, err := j.runOnce(ctx)
		return Run[R]{Result: r, Ran: true, Err: err}
	}
	var r R
	ran, err := j.cfg.Locker.Do(ctx, j.cfg.Name, func(ctx context.Context) error {
		var err error
		r, err = j.runOnce(ctx)
		return err
	})
	return Run[R]{Result: r, Ran: ran, Err: err}
}
