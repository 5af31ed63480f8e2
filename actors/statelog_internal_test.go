package actors

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// A thousand failures of one kind for a voucher log one WARN, and the
// first success after them one INFO that counts them; another voucher's
// or another kind's failure is a change of state of its own.
func TestTroubleIsLoggedOncePerChangeOfState(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := newTroubleLog(slog.New(slog.NewTextHandler(&buf, nil)))
	down := errors.New("redis: connection refused")
	for range 1000 {
		l.failed("voucher actor cannot start", 7, down)
	}
	l.failed("voucher actor cannot start", 8, down)
	l.failed("grab batch failed", 7, down)
	l.ok("voucher actor cannot start", 7)
	l.ok("voucher actor cannot start", 7)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4 (three WARN, one INFO):\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[3], "level=INFO") || !strings.Contains(lines[3], "failures=1000") {
		t.Errorf("the success after the failures: %s; want an INFO counting 1000", lines[3])
	}
	if n := l.open.Load(); n != 2 {
		t.Errorf("%d troubles open, want 2 (voucher 8, the batch of 7)", n)
	}
}
