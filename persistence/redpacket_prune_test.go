package persistence_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// pruneRig is a red-packet store on a database of the test's own, with
// red packets whose history the test writes: grabs, refunds and times
// in the past.
type pruneRig struct {
	db    *bun.DB
	store *persistence.RedPacketStore
	now   time.Time
}

func newPruneRig(tb testing.TB, db *bun.DB) *pruneRig {
	tb.Helper()
	return &pruneRig{db: db, store: persistence.NewRedPacketStore(db, persistence.NewRedPacketRedis(testenv.MustRedis(tb).Client())), now: time.Now()}
}

// redPacket creates red packet id of count packets of 1 cent, created and
// expired ago, its first grabbed packets taken; refundedAgo >= 0 records
// its refund that long ago (what was not grabbed), < 0 leaves it not
// refunded. Its row in tb_red_packet_open stays, as a refund that ran
// before the open rows existed would have left it.
func (g *pruneRig) redPacket(tb testing.TB, id int64, count, grabbed int, ago, refundedAgo time.Duration) {
	tb.Helper()
	ctx := tb.Context()
	amounts := make([]int64, count)
	for i := range amounts {
		amounts[i] = 1
	}
	rp := domain.RedPacket{ID: id, CreatorID: 7, TotalCents: int64(count), Count: count, ExpiresAt: g.now.Add(time.Hour), CreatedAt: g.now}
	if err := g.store.Create(ctx, rp, amounts); err != nil {
		tb.Fatal(err)
	}
	for seq := range grabbed {
		row := persistence.GrabRow{RedPacketID: id, Seq: seq, UserID: int64(100 + seq), AmountCents: 1, GrabTime: g.now.Add(-ago).UTC()}
		if _, err := g.db.NewInsert().Model(&row).Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	q := g.db.NewUpdate().Table("tb_red_packet").Where("id = ?", id).
		Set("create_time = ?", g.now.Add(-ago-time.Hour).UTC()).Set("expire_time = ?", g.now.Add(-ago).UTC())
	if refundedAgo >= 0 {
		q = q.Set("refund_time = ?", g.now.Add(-refundedAgo).UTC()).Set("refund_cents = ?", count-grabbed).Set("refund_count = ?", count-grabbed)
	}
	if _, err := q.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
}

// ids lists the red packets with a row in table (by its red-packet id
// column), in order.
func (g *pruneRig) ids(tb testing.TB, table, column string) []int64 {
	tb.Helper()
	var ids []int64
	if err := g.db.NewSelect().Table(table).ColumnExpr("DISTINCT "+column).OrderExpr(column).Scan(tb.Context(), &ids); err != nil {
		tb.Fatal(err)
	}
	return ids
}

const day = 24 * time.Hour

// PruneSettled deletes the red packets refunded before the cutoff with
// every row of theirs, and nothing of any other: not one refunded after
// it, not one expired long ago whose refund has not run (its grabs may
// still arrive), not one fully grabbed but not refunded. In Postgres and
// in the embedded mode's SQLite.
func TestPruneSettledRemovesOnlyRedPacketsRefundedBeforeTheCutoff(t *testing.T) {
	t.Parallel()
	for _, tc := range dialects {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newPruneRig(t, tc.open(t))
			g.redPacket(t, 1, 3, 2, 41*day, 40*day)   // refunded 40 days ago: pruned
			g.redPacket(t, 2, 2, 2, 31*day, 31*day)   // fully grabbed, refunded 31 days ago: pruned
			g.redPacket(t, 3, 2, 1, 30*day, 29*day)   // refunded 29 days ago: kept
			g.redPacket(t, 4, 2, 1, 60*day, -1)       // expired 60 days ago, not refunded: kept
			g.redPacket(t, 5, 2, 2, 60*day, -1)       // fully grabbed, not refunded: kept
			g.redPacket(t, 6, 1, 0, -2*time.Hour, -1) // running: kept
			cutoff := g.now.Add(-30 * day)

			n, err := g.store.PruneSettled(t.Context(), cutoff, 1000)
			if err != nil || n != 2 {
				t.Fatalf("pruned %d (%v), want 2", n, err)
			}
			if n, err := g.store.PruneSettled(t.Context(), cutoff, 1000); err != nil || n != 0 {
				t.Fatalf("second prune: %d (%v), want 0", n, err)
			}
			for _, tbl := range []struct{ table, column string }{
				{"tb_red_packet", "id"}, {"tb_red_packet_part", "red_packet_id"}, {"tb_red_packet_open", "red_packet_id"},
			} {
				if got, want := g.ids(t, tbl.table, tbl.column), []int64{3, 4, 5, 6}; !slices.Equal(got, want) {
					t.Errorf("%s holds red packets %v, want %v", tbl.table, got, want)
				}
			}
			if got, want := g.ids(t, "tb_red_packet_grab", "red_packet_id"), []int64{3, 4, 5}; !slices.Equal(got, want) {
				t.Errorf("tb_red_packet_grab holds grabs of red packets %v, want %v", got, want)
			}
			// The kept ones keep every row: packets sum to the total,
			// grabs as written.
			var sums []struct {
				ID    int64 `bun:"red_packet_id"`
				N     int   `bun:"n"`
				Cents int64 `bun:"cents"`
			}
			if err := g.db.NewSelect().Table("tb_red_packet_part").ColumnExpr("red_packet_id, COUNT(*) AS n, SUM(amount_cents) AS cents").
				Group("red_packet_id").Order("red_packet_id").Scan(t.Context(), &sums); err != nil {
				t.Fatal(err)
			}
			for i, want := range []int{2, 2, 2, 1} {
				if sums[i].N != want || sums[i].Cents != int64(want) {
					t.Errorf("red packet %d: %d packets of %d cents, want %d", sums[i].ID, sums[i].N, sums[i].Cents, want)
				}
			}
		})
	}
}

// One prune deletes whole red packets, the earliest refunded first, until
// their packets reach the bound, and at least one however large.
func TestPruneSettledDeletesBoundedBatchesOldestFirst(t *testing.T) {
	t.Parallel()
	g := newPruneRig(t, testenv.MustPostgres(t))
	g.redPacket(t, 1, 3, 0, 40*day, 38*day)
	g.redPacket(t, 2, 3, 3, 40*day, 39*day)
	g.redPacket(t, 3, 3, 1, 40*day, 37*day)
	g.redPacket(t, 4, 5, 1, 40*day, 36*day)
	cutoff := g.now.Add(-30 * day)
	for _, step := range []struct {
		max  int
		want int
		left []int64
	}{
		{5, 1, []int64{1, 3, 4}}, // 2 (refunded first); 2 and 1 would be 6 packets
		{6, 2, []int64{4}},       // 1 and 3
		{1, 1, nil},              // 4 alone, though it has 5
		{1, 0, nil},
	} {
		n, err := g.store.PruneSettled(t.Context(), cutoff, step.max)
		if err != nil || n != step.want {
			t.Fatalf("prune of at most %d packets: %d (%v), want %d", step.max, n, err, step.want)
		}
		if got := g.ids(t, "tb_red_packet", "id"); !slices.Equal(got, step.left) {
			t.Fatalf("prune of at most %d packets left %v, want %v", step.max, got, step.left)
		}
	}
}

// A red packet's order log leaves the writers' registry once its red
// packet is gone from Redis and settled in the database: refunded, or
// pruned since (a writer that was down for the whole retention finds no
// row at all). While the row is there and not refunded, the log stays.
func TestARedPacketLogLeavesTheRegistryOnceItsRedPacketIsSettledOrPruned(t *testing.T) {
	t.Parallel()
	db, rdb, r, store := redPacketStores(t)
	ctx := t.Context()
	logs := persistence.NewRedPacketLogs(rdb)
	w := persistence.NewRedPacketLogHandler(db, rdb, quiet, persistence.BatchOptions{Consumer: "prune-test"})
	testenv.MustRedPacket(t, store, 1, []int64{1, 1}, time.Hour)
	registered := func() []string {
		t.Helper()
		l, err := logs.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	log := persistence.RedPacketLogKey(1)
	if got := registered(); !slices.Equal(got, []string{log}) {
		t.Fatalf("registered logs %v, want %v", got, []string{log})
	}
	if err := r.Forget(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := w.Prune(ctx, []string{log}); n != 0 || len(registered()) != 1 {
		t.Fatalf("pruned %d logs of a red packet the database holds open, want 0", n)
	}
	if _, err := db.NewUpdate().Table("tb_red_packet").Set("refund_time = ?", time.Now().Add(-40*day).UTC()).Where("id = 1").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := store.PruneSettled(ctx, time.Now().Add(-30*day), 1000); err != nil || n != 1 {
		t.Fatalf("PruneSettled: %d (%v), want 1", n, err)
	}
	if n := w.Prune(ctx, []string{log}); n != 1 || len(registered()) != 0 {
		t.Fatalf("pruned %d logs of a pruned red packet (%v still registered), want 1", n, registered())
	}
	// A grab of it that turns up anyway finds no row and is refused, to
	// be dead-lettered, never stored.
	late := domain.LogEntry{Log: log, ID: "1-1", Values: map[string]any{
		persistence.EntryRedPacketID: "1", persistence.EntryPacketSeq: "0", persistence.EntryUserID: "50",
		persistence.EntryAmount: "1", persistence.EntryTime: strconv.FormatInt(time.Now().UnixMilli(), 10),
	}}
	refused, err := w.Handle(ctx, []domain.LogEntry{late})
	if err != nil || refused[0] == nil {
		t.Fatalf("a grab of a pruned red packet: refused %v (%v), want refused", refused, err)
	}
	if got := (&pruneRig{db: db}).ids(t, "tb_red_packet_grab", "red_packet_id"); len(got) != 0 {
		t.Fatalf("grabs of red packets %v stored, want none", got)
	}
}
