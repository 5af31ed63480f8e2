package persistence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// tally is a second, trivial family of logs for a LogConsumer: entries
// carry a number "n"; the handler sums them, fails its first attempts, and
// refuses odd numbers marked "bad". It records what it saw so the test can
// check the consumer's guarantees without the order writer.
type tally struct {
	rdb       redis.UniversalClient
	failFirst int

	mu       sync.Mutex
	calls    []time.Time       // when each Handle began
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

func key(e persistence.LogEntry) string { return e.Log + "/" + e.ID }

func (t *tally) Handle(_ context.Context, batch []persistence.LogEntry) (map[int]*persistence.Refusal, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, time.Now())
	refused := map[int]*persistence.Refusal{}
	for i, e := range batch {
		t.seen[key(e)]++
		if e.Values["bad"] == "yes" {
			refused[i] = &persistence.Refusal{Reason: "odd", Err: errors.New("marked bad")}
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

func (t *tally) DeadLetter(ctx context.Context, dead []persistence.DeadEntry) error {
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

// TestLogConsumerGuaranteesHoldForAnyHandler drives a LogConsumer with the
// trivial tally handler over two logs: every entry is handled once and
// acknowledged (deleted), a failing handler is retried with a growing
// backoff, and refused entries are dead-lettered while still pending, then
// acknowledged, and never handed to the handler again.
func TestLogConsumerGuaranteesHoldForAnyHandler(t *testing.T) {
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
	c := persistence.NewLogConsumer(rdb, quiet, persistence.LogFamily{
		Name: "tally", Registry: "tally:logs", Group: "tally", LeasePrefix: "tally:consumer:",
		Handler: h, DeadLetters: h,
	}, persistence.LogConsumerOptions{Batch: 50, MaxBackoff: 400 * time.Millisecond})
	if err := c.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	drainCtx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := c.WaitDrained(drainCtx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after its context ended", err)
	}

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
