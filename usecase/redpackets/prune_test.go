package redpackets_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/testkit/testenv"
	"flashsale/usecase/redpackets"
)

// The pruning job deletes a red packet once its refund is older than the
// retention, and keeps every other: one refunded recently, one expired
// long ago whose refund has not run, one still running. The refunded one
// went through the real refund, after a grab reached the database.
func TestPruningDeletesSettledRedPacketsPastTheRetention(t *testing.T) {
	t.Parallel()
	g := newQuotaRig(t)
	s := g.service(redpackets.Config{})
	w := testenv.StartRedPacketWriter(t, g.db, g.rdb, writer.Options{})
	old := mustCreate(t, s, 7, 2, time.Second)
	recent := mustCreate(t, s, 7, 2, time.Second)
	unrefunded := mustCreate(t, s, 7, 2, time.Second)
	running := mustCreate(t, s, 7, 2, time.Hour)
	g.grab(t, old.ID, 20)
	g.grab(t, unrefunded.ID, 21)
	testenv.Drained(t, w, time.Minute)
	time.Sleep(time.Until(old.ExpiresAt) + 50*time.Millisecond)
	for _, rp := range []domain.RedPacket{old, recent} {
		g.refund(t, rp.ID)
	}
	// A month on: the old one was refunded 31 days ago, the recent one
	// 29; the unrefunded one expired 60 days ago and was never refunded
	// (its refund is due, and its grabs may still arrive).
	g.backdate(t, old.ID, "refund_time", 31*day)
	g.backdate(t, recent.ID, "refund_time", 29*day)
	g.backdate(t, unrefunded.ID, "expire_time", 60*day)

	p := redpackets.NewPruning(g.store, nil, redpackets.PruneConfig{Retention: 30 * day}, testenv.QuietLogger())
	if n, err := p.RunOnce(t.Context()); err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want 1", n, err)
	}
	if got, want := g.redPacketIDs(t, "tb_red_packet", "id"), []int64{recent.ID, unrefunded.ID, running.ID}; !slices.Equal(got, want) {
		t.Fatalf("tb_red_packet holds %v, want %v", got, want)
	}
	if got, want := g.redPacketIDs(t, "tb_red_packet_part", "red_packet_id"), []int64{recent.ID, unrefunded.ID, running.ID}; !slices.Equal(got, want) {
		t.Fatalf("tb_red_packet_part holds packets of %v, want %v", got, want)
	}
	if got, want := g.redPacketIDs(t, "tb_red_packet_grab", "red_packet_id"), []int64{unrefunded.ID}; !slices.Equal(got, want) {
		t.Fatalf("tb_red_packet_grab holds grabs of %v, want %v", got, want)
	}
	if n, err := p.RunOnce(t.Context()); err != nil || n != 0 {
		t.Fatalf("second run pruned %d (%v), want 0", n, err)
	}
}

// A retention under a day is taken as a day: the daily quota counts the
// red packets created within the last one.
func TestPruningKeepsADayAtLeast(t *testing.T) {
	t.Parallel()
	g := newQuotaRig(t)
	s := g.service(redpackets.Config{})
	rp := mustCreate(t, s, 7, 1, time.Second)
	time.Sleep(time.Until(rp.ExpiresAt) + 50*time.Millisecond)
	testenv.StartRedPacketWriter(t, g.db, g.rdb, writer.Options{})
	g.refund(t, rp.ID)
	g.backdate(t, rp.ID, "create_time", 23*time.Hour)
	g.backdate(t, rp.ID, "refund_time", 23*time.Hour)
	p := redpackets.NewPruning(g.store, nil, redpackets.PruneConfig{Retention: time.Hour}, testenv.QuietLogger())
	if n, err := p.RunOnce(t.Context()); err != nil || n != 0 {
		t.Fatalf("pruned %d (%v) with a retention of an hour, want 0: the red packet is 23 hours old", n, err)
	}
	g.backdate(t, rp.ID, "refund_time", 25*time.Hour)
	if n, err := p.RunOnce(t.Context()); err != nil || n != 1 {
		t.Fatalf("pruned %d (%v) a day after the refund, want 1", n, err)
	}
}

const day = 24 * time.Hour

// refund refunds an expired red packet, waiting until no grab of it can
// still arrive.
func (g *quotaRig) refund(tb testing.TB, id int64) {
	tb.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		done, _, _, err := g.store.Refund(context.Background(), id, time.Now())
		if err != nil {
			tb.Fatal(err)
		}
		if done {
			return
		}
	}
	tb.Fatalf("red packet %d was not refunded within 30s", id)
}

// backdate sets a time column of a red packet's row to ago before now.
func (g *quotaRig) backdate(tb testing.TB, id int64, column string, ago time.Duration) {
	tb.Helper()
	if _, err := g.db.NewUpdate().Table("tb_red_packet").Set("? = ?", bun.Ident(column), time.Now().Add(-ago).UTC()).Where("id = ?", id).Exec(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// redPacketIDs lists the red packets with a row in table, in order.
func (g *quotaRig) redPacketIDs(tb testing.TB, table, column string) []int64 {
	tb.Helper()
	var ids []int64
	if err := g.db.NewSelect().Table(table).ColumnExpr("DISTINCT ?", bun.Ident(column)).OrderExpr("1").Scan(context.Background(), &ids); err != nil {
		tb.Fatal(err)
	}
	return ids
}
