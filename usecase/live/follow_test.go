package live_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"flashsale/domain"
)

// feed is a subscription the test writes announcements into; closed, it
// fails as a closed subscription does.
type feed chan domain.Announcement

func (f feed) Next(ctx context.Context) (domain.Announcement, error) {
	select {
	case <-ctx.Done():
		return domain.Announcement{}, ctx.Err()
	case an, ok := <-f:
		if !ok {
			return domain.Announcement{}, errors.New("subscription closed")
		}
		return an, nil
	}
}

// Follow passes a voucher's stock change, and a missed-announcements
// re-read, to the subscriber of that voucher; it ends with its context
// and reports a subscription that fails.
func TestFollowPassesAnnouncementsToSubscribers(t *testing.T) {
	t.Parallel()
	stock := &fakeStock{remaining: 40}
	svc, _ := newService(t, stock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := subscribe(t, ctx, svc)
	if first := <-events; first.remaining != 40 {
		t.Fatalf("first event %+v, want 40", first)
	}
	f := make(feed)
	followed := make(chan error, 1)
	go func() { followed <- svc.Follow(ctx, f) }()

	stock.set(30)
	f <- domain.Announcement{Kind: domain.StockChanged, IDs: []int64{1}}
	readUntil(t, events, 30, 2*time.Second)
	stock.set(20)
	f <- domain.Announcement{Kind: domain.Missed}
	readUntil(t, events, 20, 2*time.Second)

	cancel()
	if err := <-followed; err != nil {
		t.Fatalf("Follow ended with %v after its context ended, want nil", err)
	}
	closed := make(feed)
	close(closed)
	if err := svc.Follow(context.Background(), closed); err == nil {
		t.Fatal("Follow over a closed subscription returned nil")
	}
}
