package persistence_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// Each store's subscription reads its channels as announcements: first
// the subscription itself (Missed), then each change in the order it was
// announced, and it ends with its context.
func TestSubscriptionsReadAnnouncements(t *testing.T) {
	t.Parallel()
	rdb := testenv.MustRedis(t).Client()
	type step struct {
		announce func(ctx context.Context) error
		want     domain.Announcement
	}
	stock, live, gate := persistence.NewStock(rdb), persistence.NewLive(rdb), persistence.NewGate(rdb)
	tests := []struct {
		name      string
		subscribe func(ctx context.Context) *persistence.Subscription
		steps     []step
	}{
		{"voucher events", stock.Subscribe, []step{
			{func(ctx context.Context) error { return stock.Announce(ctx, 7) }, domain.Announcement{Kind: domain.VoucherChanged, IDs: []int64{7}}},
		}},
		{"live changes", live.Subscribe, []step{
			{func(ctx context.Context) error { return live.PublishStock(ctx, []int64{3, 4}) }, domain.Announcement{Kind: domain.StockChanged, IDs: []int64{3, 4}}},
			{func(ctx context.Context) error { return stock.Announce(ctx, 9) }, domain.Announcement{Kind: domain.StockChanged, IDs: []int64{9}}},
		}},
		{"gate changes", gate.Subscribe, []step{
			{func(ctx context.Context) error { return gate.AnnounceVoucher(ctx, 5) }, domain.Announcement{Kind: domain.GateChanged, IDs: []int64{5}}},
			{func(ctx context.Context) error {
				return gate.Block(ctx, domain.Block{VoucherID: 5, Net: netip.MustParsePrefix("10.0.0.0/8")})
			}, domain.Announcement{Kind: domain.BlocklistChanged}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sub := tc.subscribe(ctx)
			defer sub.Close()
			if an, err := sub.Next(ctx); err != nil || an.Kind != domain.Missed {
				t.Fatalf("first announcement %+v, %v; want the subscription's (Missed)", an, err)
			}
			for _, s := range tc.steps {
				if err := s.announce(ctx); err != nil {
					t.Fatal(err)
				}
				an, err := sub.Next(ctx)
				if err != nil || an.Kind != s.want.Kind || !slices.Equal(an.IDs, s.want.IDs) {
					t.Fatalf("announcement %+v, %v; want %+v", an, err, s.want)
				}
			}
			ended, end := context.WithCancel(ctx)
			end()
			if _, err := sub.Next(ended); err == nil {
				t.Fatal("Next returned no error after its context ended")
			}
		})
	}
}
