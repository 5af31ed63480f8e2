package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"flashsale/actors/writer"
)

// WaitFor waits until cond holds, checking every millisecond, and fails
// the test after 10 s: for a state a test cannot be told of (a grab
// reached its actor's queue, Redis recorded a sale), instead of a sleep
// that guesses how long it takes.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Drained waits until the persistence actor w has handled and
// acknowledged every entry of its family's logs (Writer.WaitDrained), and
// fails the test if that takes longer than within.
func Drained(tb testing.TB, w *writer.Writer, within time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := w.WaitDrained(ctx); err != nil {
		tb.Fatalf("logs not drained within %v: %v", within, err)
	}
}

// LongEnv, set to 1, makes the tests that have a soak-length version run
// it (`make long`); the test command runs their short versions.
const LongEnv = "FLASHSALE_LONG"

// Long reports whether the soak-length versions run: size picks between a
// test's short and long figures with it.
func Long() bool { return os.Getenv(LongEnv) == "1" }

// Size is short, or long under `make long` (LongEnv).
func Size(short, long int) int {
	if Long() {
		return long
	}
	return short
}
