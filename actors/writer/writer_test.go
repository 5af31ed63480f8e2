package writer_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/go-redis/v9"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// tally is a third, trivial family of logs for the persistence actor: entries
// carry a number "n"; the handler sums them, fails its first attempts, and
// refuses odd numbers marked "bad". It records what it saw so the test can
// check the consumer's guarantees without the order writer.
type tally struct {
	rdb       redis.UniversalClient
	failFirst int

	mu       sync.Mutex
	calls    []time.Time       // when each Handle began
	sizes    []int             // how many entries each Handle got
	handled  map[string]int    // successful handlings per entry (log/id)
	seen     map[string]int    // every handling per entry, failed ones too
	refused  map[string]int    // refusals per entry
	dead     map[string]string // dead letters: entry -> reason
	deadPend map[string]int64  // pending entries of the entry's log when it was dead-lettered
}

func newTally(rdb redis.UniversalClient, failFirst int) *tally {
	return &tally{rdb: rdb, failFirst: failFirst, handled: map[string]int{}, seen: map[string]int{},
		refused: map[string]int{}, dead: map[string]string{}, deadPend: map[string]int64{}}
}

func key(e domain.LogEntry) string { return e.Log + "/" + e.ID }

func (t *tally) Handle(_ context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, time.Now())
	t.sizes = append(t.sizes, len(batch))
	refused := map[int]*domain.Refusal{}
	for i, e := range batch {
		t.seen[key(e)]++
		if e.Values["bad"] == "yes" {
			refused[i] = &domain.Refusal{Reason: "odd", Err: errors.New("marked bad")}
			t.refused[key(e)]++
		}
	}
	if len(t.calls) <= t.failFirst {
		return refused, errors.New("the store is down")
	}
	for i, e := range batch {
		if refused[i] == nil {
			t.handled[key(e)]++
		}
	}
	return refused, nil
}

func (t *tally) DeadLetter(ctx context.Context, dead []domain.DeadEntry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range dead {
		t.dead[key(d.Entry)] = d.Why.Reason
		p, err := t.rdb.XPending(ctx, d.Entry.Log, "tally").Result()
		if err != nil {
			return err
		}
		t.deadPend[key(d.Entry)] = p.Count
	}
	return nil
}

func (t *tally) Prune(context.Context, []string) int { return 0 }

func (t *tally) Persisted() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.handled))
}

// startTally runs a persistence actor over the tally logs until the test
// ends, under a lease on its name.
func startTally(tb testing.TB, rdb redis.UniversalClient, h writer.Handler, opts writer.Options) *writer.Writer {
	tb.Helper()
	log := testenv.QuietLogger()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
	w := writer.New(writer.NewFamily("tally", persistence.NewLogs(rdb, "tally:logs", "tally", "tally:consumer:"), h), system, log, opts)
	if err := w.Acquire(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	if err := w.Start(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Stop(); system.Shutdown() })
	return w
}

// TestWriterGuaranteesHoldForAnyHandler drives the persistence actor with the
// trivial tally handler over two logs: every entry is handled once and
// acknowledged (deleted), a failing handler is retried with a growing
// backoff, and refused entries are dead-lettered while still pending, then
// acknowledged, and never handed to the handler again.
func TestWriterGuaranteesHoldForAnyHandler(t *testing.T) {
	t.Parallel()
	rdb := testenv.MustRedis(t).Client()
	ctx := t.Context()
	logs := []string{"tally:a", "tally:b"}
	for _, l := range logs {
		if err := rdb.XGroupCreateMkStream(ctx, l, "tally", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.SAdd(ctx, "tally:logs", l).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const perLog = 120
	var bad []string
	for _, l := range logs {
		for n := range perLog {
			vals := []any{"n", n}
			if n%40 == 1 {
				vals = append(vals, "bad", "yes")
			}
			id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: l, Values: vals}).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n%40 == 1 {
				bad = append(bad, l+"/"+id)
			}
		}
	}
	h := newTally(rdb, 3)
	c := startTally(t, rdb, h, writer.Options{Batch: 50, MaxBackoff: 400 * time.Millisecond})
	drainCtx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := c.WaitDrained(drainCtx); err != nil {
		t.Fatal(err)
	}
	c.Stop()

	h.mu.Lock()
	defer h.mu.Unlock()
	t.Run("every entry handled once or dead-lettered once", func(t *testing.T) {
		if got, want := len(h.handled)+len(h.dead), 2*perLog; got != want {
			t.Fatalf("%d entries handled or dead-lettered, want %d", got, want)
		}
		for k, n := range h.handled {
			if n != 1 {
				t.Fatalf("entry %s handled %d times", k, n)
			}
			if _, ok := h.dead[k]; ok {
				t.Fatalf("entry %s both handled and dead-lettered", k)
			}
		}
	})
	t.Run("every entry acknowledged and deleted", func(t *testing.T) {
		for _, l := range logs {
			if n := rdb.XLen(ctx, l).Val(); n != 0 {
				t.Fatalf("%s holds %d entries", l, n)
			}
			if p := rdb.XPending(ctx, l, "tally").Val(); p.Count != 0 {
				t.Fatalf("%s has %d pending entries", l, p.Count)
			}
		}
	})
	t.Run("a failing handler is retried with a growing backoff", func(t *testing.T) {
		if len(h.calls) < 4 {
			t.Fatalf("%d calls, want the 3 failures and a success", len(h.calls))
		}
		prev := time.Duration(0)
		for i := 1; i <= 3; i++ {
			gap := h.calls[i].Sub(h.calls[i-1])
			if gap < 40*time.Millisecond || gap < prev {
				t.Fatalf("retry %d came after %v (previous %v): no growing backoff", i, gap, prev)
			}
			prev = gap
		}
	})
	t.Run("refused entries dead-lettered before their acknowledgement, and handed over once", func(t *testing.T) {
		if len(h.dead) != len(bad) {
			t.Fatalf("%d dead letters, want %d", len(h.dead), len(bad))
		}
		for _, k := range bad {
			if h.dead[k] != "odd" {
				t.Fatalf("entry %s dead-lettered with %q", k, h.dead[k])
			}
			if h.deadPend[k] == 0 {
				t.Fatalf("entry %s was acknowledged before it was dead-lettered", k)
			}
			if h.seen[k] != 1 || h.refused[k] != 1 {
				t.Fatalf("refused entry %s handed to the handler %d times", k, h.seen[k])
			}
		}
	})
}

// TestWriterLingersOnlyAfterABatchThatDidNotFill: the first entry
// after a quiet spell is handled at once; entries that arrive while the
// consumer lingers after that small batch are handled together, in one
// batch, rather than one transaction each.
func TestWriterLingersOnlyAfterABatchThatDidNotFill(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	rdb := srv.Client()
	ctx := t.Context()
	const log = "tally:linger"
	if err := rdb.XGroupCreateMkStream(ctx, log, "tally", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(ctx, "tally:logs", log).Err(); err != nil {
		t.Fatal(err)
	}
	h := newTally(rdb, 0)
	const linger = time.Second
	// The consumer's own client tells when it waits for new entries.
	var blocked atomic.Bool
	wrdb := srv.Client()
	wrdb.AddHook(testenv.CommandHook(func(cmd redis.Cmder) {
		if cmd.Name() == "xreadgroup" && slices.Contains(cmd.Args(), any("block")) {
			blocked.Store(true)
		}
	}))
	startTally(t, wrdb, h, writer.Options{Batch: 50, Linger: linger})
	testenv.WaitFor(t, "the consumer to find the log empty and wait in a read", blocked.Load)
	add := func(n int) {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: log, Values: []any{"n", n}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	handled := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.handled)
	}
	wait := func(n int, within time.Duration) time.Duration {
		start := time.Now()
		for handled() < n {
			if time.Since(start) > within {
				t.Fatalf("%d entries handled after %v, want %d", handled(), within, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	add(1)
	if took := wait(1, 5*time.Second); took >= linger*9/10 {
		t.Fatalf("the first entry after a quiet spell waited %v: the consumer lingered before reading it", took)
	}
	add(2) // the consumer lingers now, after a batch of one
	// Entries that arrive apart during the linger: the sleep is the
	// behaviour under test, not a wait for a state.
	time.Sleep(50 * time.Millisecond)
	add(3)
	wait(3, 5*time.Second)
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := []int{1, 2}; !slices.Equal(h.sizes, want) {
		t.Fatalf("batches of %v, want %v: the entries that arrived during the linger were not handled together", h.sizes, want)
	}
}

// down is a handler whose store is always down.
type down struct{ calls atomic.Int64 }

func (d *down) Handle(context.Context, []domain.LogEntry) (map[int]*domain.Refusal, error) {
	d.calls.Add(1)
	return nil, errors.New("the store is down")
}
func (d *down) DeadLetter(context.Context, []domain.DeadEntry) error { return nil }
func (d *down) Prune(context.Context, []string) int                  { return 0 }
func (d *down) Persisted() int64                                     { return 0 }

// Stop is honoured at once while the actor waits out a long backoff after
// failed attempts: no message blocks its mailbox, and the entry it could
// not handle stays pending in Redis for the next run.
func TestWriterStopsAtOnceWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	rdb := testenv.MustRedis(t).Client()
	ctx := t.Context()
	const log = "tally:down"
	if err := rdb.XGroupCreateMkStream(ctx, log, "tally", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(ctx, "tally:logs", log).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: log, Values: []any{"n", 1}}).Err(); err != nil {
		t.Fatal(err)
	}
	h := &down{}
	w := startTally(t, rdb, h, writer.Options{MaxBackoff: time.Minute})
	testenv.WaitFor(t, "six attempts", func() bool { return h.calls.Load() >= 6 })
	began := time.Now()
	w.Stop()
	if took := time.Since(began); took > time.Second {
		t.Fatalf("stop took %v", took)
	}
	calls := h.calls.Load()
	// Nothing may happen after Stop: a check of an absence needs a
	// window, and this sleep is it.
	time.Sleep(300 * time.Millisecond)
	if h.calls.Load() != calls {
		t.Fatal("the handler was called after Stop returned")
	}
	if p := rdb.XPending(ctx, log, "tally").Val(); p.Count != 1 {
		t.Fatalf("%d entries pending after the stop, want the one not handled", p.Count)
	}
}
