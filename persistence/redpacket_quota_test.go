package persistence_test

import (
	"slices"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// CreateWithin counts what is open the same way in Postgres and in the
// embedded mode's SQLite: not refunded, and a packet not in
// tb_red_packet_grab, also when the last packet is taken and an earlier
// one is not (a packet returned to the back of the queue).
func TestCreateWithinCountsTheCreatorsOpenRedPackets(t *testing.T) {
	t.Parallel()
	for _, tc := range dialects {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.open(t)
			store := persistence.NewRedPacketStore(db, persistence.NewRedPacketRedis(testenv.MustRedis(t).Client()))
			now := time.Now().Truncate(time.Millisecond)
			create := func(id int64, count int, ttl time.Duration) []time.Time {
				t.Helper()
				amounts := make([]int64, count)
				for i := range amounts {
					amounts[i] = 1
				}
				rp := domain.RedPacket{ID: id, CreatorID: 7, TotalCents: int64(count), Count: count, ExpiresAt: now.Add(ttl), CreatedAt: now}
				over, err := store.CreateWithin(t.Context(), rp, amounts, domain.RedPacketQuota{MaxOpen: 2})
				if err != nil {
					t.Fatal(err)
				}
				if over == nil {
					return nil
				}
				return over.Open
			}
			grabbed := func(id int64, seq int) {
				t.Helper()
				g := persistence.GrabRow{RedPacketID: id, Seq: seq, UserID: int64(100 + seq), AmountCents: 1, GrabTime: time.Now().UTC()}
				if _, err := db.NewInsert().Model(&g).Exec(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			exists := func(id int64) bool { return redPacketStored(t, db, id) }

			if open := create(1, 2, 2*time.Hour); open != nil {
				t.Fatalf("first: refused with %v open", open)
			}
			if open := create(2, 1, time.Hour); open != nil {
				t.Fatalf("second: refused with %v open", open)
			}
			open := create(3, 1, time.Hour)
			if want := []time.Time{now.Add(time.Hour), now.Add(2 * time.Hour)}; !slices.EqualFunc(open, want, time.Time.Equal) || exists(3) {
				t.Fatalf("third: open %v (stored: %v), want refused with %v", open, exists(3), want)
			}
			grabbed(2, 0) // red packet 2 fully grabbed
			if open := create(3, 1, time.Hour); open != nil || !exists(3) {
				t.Fatalf("after red packet 2 was fully grabbed: refused with %v open", open)
			}
			grabbed(1, 1) // red packet 1's last packet, not its first
			if open := create(4, 1, time.Hour); len(open) != 2 || exists(4) {
				t.Fatalf("red packet 1 with a packet left: open %v, stored %v; want refused with 2 open", open, exists(4))
			}
			var left int
			if err := db.NewSelect().Table("tb_red_packet_open").ColumnExpr("COUNT(*)").Scan(t.Context(), &left); err != nil || left != 2 {
				t.Fatalf("tb_red_packet_open holds %d rows (%v), want 2: red packet 2 closed", left, err)
			}
		})
	}
}

// redPacketStored reports whether tb_red_packet holds red packet id.
func redPacketStored(tb testing.TB, db bun.IDB, id int64) bool {
	tb.Helper()
	ok, err := db.NewSelect().Table("tb_red_packet").Where("id = ?", id).Exists(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return ok
}
