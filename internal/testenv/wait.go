package testenv

import (
	"testing"
	"time"
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
