package redpackets_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"flashsale/usecase/redpackets"
)

// refundsOf is a Storer whose due red packets refund the cents given.
type refundsOf struct {
	redpackets.Storer
	cents map[int64]int64
}

func (s refundsOf) Due(context.Context, time.Time, int) ([]int64, error) {
	return []int64{1, 2}, nil
}

func (s refundsOf) Refund(_ context.Context, id int64, _ time.Time) (bool, bool, int64, error) {
	return true, true, s.cents[id], nil
}

// A refund logs the money it paid back; a red packet grabbed whole settles
// without an INFO line ("refunded cents=0" said nothing).
func TestARefundLogsOnlyMoneyPaidBack(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	job := redpackets.NewRefunds(refundsOf{cents: map[int64]int64{1: 0, 2: 150}}, nil, redpackets.RefundConfig{Grace: time.Nanosecond}, log)
	if n, err := job.RunOnce(t.Context()); err != nil || n != 2 {
		t.Fatalf("RunOnce: %d, %v; want both settled", n, err)
	}
	if got := strings.Count(out.String(), "red packet refunded"); got != 1 || !strings.Contains(out.String(), "red_packet=2 cents=150") || strings.Contains(out.String(), "cents=0") {
		t.Fatalf("the log, want one line for red packet 2's 150 cents:\n%s", out.String())
	}
}
