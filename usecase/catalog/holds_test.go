package catalog_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"flashsale/usecase/catalog"
)

// cleanRows are writer lease rows whose writers report holding nothing
// since clean (zero: not yet).
type cleanRows struct{ clean atomic.Pointer[time.Time] }

func (r *cleanRows) Now(context.Context) (time.Time, error) { return time.Now(), nil }

func (r *cleanRows) CleanSince(context.Context) (time.Time, error) {
	if t := r.clean.Load(); t != nil {
		return *t, nil
	}
	return time.Time{}, nil
}

// endAll ends every hold it is asked to.
type endAll struct{}

func (endAll) EndHold(context.Context, int64, string) (bool, error) { return true, nil }

// flashsale_vouchers_held counts the vouchers whose reload holds their
// sales (a voucher reloaded twice counts once), and falls back as the
// holds end: once the writers report, and at the bound when they do not.
func TestVouchersHeldFollowsTheHolds(t *testing.T) {
	rows := &cleanRows{}
	holds := catalog.NewHolds(rows, endAll{}, time.Hour, slog.New(slog.DiscardHandler))
	base := vouchersHeld(t)
	holds.Add(1, "a")
	holds.Add(2, "b")
	holds.Add(1, "c") // reloaded again: one voucher still
	if got := vouchersHeld(t) - base; got != 2 || holds.Held() != 2 {
		t.Fatalf("two vouchers held: gauge rose by %v, Held %d, want 2 and 2", got, holds.Held())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); holds.Run(ctx) }()
	defer func() { cancel(); <-done }()
	later := time.Now().Add(time.Hour)
	rows.clean.Store(&later) // every writer reports holding nothing
	waitFor(t, func() bool { return holds.Held() == 0 })
	if got := vouchersHeld(t) - base; got != 0 {
		t.Fatalf("holds ended: gauge %v above where it began, want 0", got)
	}

	// A bound of 1ns has passed by the first round: the writers never report.
	bounded := catalog.NewHolds(&cleanRows{}, endAll{}, time.Nanosecond, slog.New(slog.DiscardHandler))
	bounded.Add(3, "d")
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan struct{})
	go func() { defer close(bdone); bounded.Run(bctx) }()
	defer func() { bcancel(); <-bdone }()
	waitFor(t, func() bool { return bounded.Held() == 0 })
	if got := vouchersHeld(t) - base; got != 0 {
		t.Fatalf("a hold given up at its bound: gauge %v above where it began, want 0", got)
	}
}

// waitFor polls cond (the holds' own loop runs every 20ms) for 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

// vouchersHeld reads flashsale_vouchers_held from the default registry.
func vouchersHeld(t *testing.T) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "flashsale_vouchers_held" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no flashsale_vouchers_held in the default registry")
	return 0
}
