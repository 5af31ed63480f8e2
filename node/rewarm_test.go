package node

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// flakyWarmer fails its first runs, then rebuilds one voucher.
type flakyWarmer struct {
	failFirst int64
	runs      atomic.Int64
}

func (w *flakyWarmer) PreheatStale(context.Context) (int, error) {
	if w.runs.Add(1) <= w.failFirst {
		return 0, errors.New("connect: connection refused")
	}
	return 1, nil
}

// A rewarm run that fails (set off by a failover before every client
// follows the new primary) is tried again within a fraction of a second,
// not left to the voucher's next grab; one that keeps failing gives up
// after rewarmRetryLast's doubling, a few seconds.
func TestARewarmRunThatFailsIsTriedAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		failFirst, wantRuns int64
	}{
		{failFirst: 2, wantRuns: 3},
		{failFirst: 1000, wantRuns: 7}, // 50 ms doubled up to 1.6 s: six waits
	} {
		w := &flakyWarmer{failFirst: tc.failFirst}
		r := &rewarmer{warmer: w, log: slog.New(slog.DiscardHandler)}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		r.trigger(t.Context())
		deadline := time.Now().Add(10 * time.Second)
		for r.running.Load() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		r.Stop()
		if got := w.runs.Load(); got != tc.wantRuns {
			t.Errorf("failing its first %d runs: rebuilt in %d runs, want %d", tc.failFirst, got, tc.wantRuns)
		}
	}
}
