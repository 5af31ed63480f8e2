package persistence_test

import (
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// The daily bound counts the creator's red packets created within the 24
// hours before the create, in Postgres and in the embedded mode's SQLite:
// older ones, and other creators', do not count; refused, the create
// stores nothing and says when the create that frees a slot leaves the
// window. Open red packets play no part here (no MaxOpen).
func TestCreateWithinCountsTheCreatorsRollingDay(t *testing.T) {
	t.Parallel()
	for _, tc := range dialects {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.open(t)
			store := persistence.NewRedPacketStore(db, persistence.NewRedPacketRedis(testenv.MustRedis(t).Client()))
			now := time.Now().Truncate(time.Millisecond)
			quota := domain.RedPacketQuota{MaxPerDay: 3}
			create := func(id, creator int64, at time.Time) *domain.RedPacketOverQuota {
				t.Helper()
				rp := domain.RedPacket{ID: id, CreatorID: creator, TotalCents: 1, Count: 1, ExpiresAt: at.Add(time.Hour), CreatedAt: at}
				over, err := store.CreateWithin(t.Context(), rp, []int64{1}, quota)
				if err != nil {
					t.Fatal(err)
				}
				return over
			}
			stored := func(id int64) bool { return redPacketStored(t, db, id) }
			// Three creates days ago (each create's day ends at its own
			// time), and one of another creator.
			for i, at := range []time.Time{now.Add(-100 * time.Hour), now.Add(-99 * time.Hour), now.Add(-98 * time.Hour)} {
				if over := create(int64(1+i), 7, at); over != nil {
					t.Fatalf("create %d days ago: refused %+v", i+1, over)
				}
			}
			create(10, 8, now.Add(-time.Minute))
			// Within the day: three pass, the fourth is refused.
			inDay := []time.Time{now.Add(-23 * time.Hour), now.Add(-2 * time.Hour), now.Add(-time.Hour)}
			for i, at := range inDay {
				if over := create(int64(20+i), 7, at); over != nil {
					t.Fatalf("create %d of the day: refused %+v", i+1, over)
				}
			}
			over := create(30, 7, now)
			if over == nil || stored(30) {
				t.Fatalf("the fourth create of the day: refused %v, stored %v; want refused, nothing stored", over != nil, stored(30))
			}
			if want := inDay[0].Add(domain.RedPacketDay); !over.DayFreesAt.Equal(want) || over.Open != nil {
				t.Fatalf("refused with %+v, want DayFreesAt %v (the oldest of the day, 24h on) and no open ones", over, want)
			}
			// A millisecond before the oldest of the day is 24 hours old,
			// still refused; at that moment, one more passes.
			if over := create(31, 7, inDay[0].Add(domain.RedPacketDay-time.Millisecond)); over == nil {
				t.Fatal("create a millisecond before the oldest left the window: passed")
			}
			if over := create(31, 7, inDay[0].Add(domain.RedPacketDay)); over != nil {
				t.Fatalf("create when the oldest left the window: refused %+v", over)
			}
			// Another creator has a day of their own.
			if over := create(40, 8, now); over != nil {
				t.Fatalf("another creator: refused %+v", over)
			}
		})
	}
}
