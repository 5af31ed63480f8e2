package live

import (
	"context"
	"fmt"

	"flashsale/domain"
)

// Announcements is a subscription to what the live subscriptions follow
// (persistence.Subscription from persistence.Live.Subscribe), read one at
// a time.
type Announcements interface {
	Next(ctx context.Context) (domain.Announcement, error)
}

// Follow passes every announcement of a to the subscribers here until ctx
// ends (nil then): stock changes (StockChanged), order changes
// (OrderChanged), and a re-read of everything when announcements may have
// been missed (Resync). The caller owns a and closes it after Follow
// returns.
func (s *Service) Follow(ctx context.Context, a Announcements) error {
	for {
		an, err := a.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("live announcements: %w", err)
		}
		switch an.Kind {
		case domain.Missed:
			s.Resync()
		case domain.StockChanged:
			for _, id := range an.IDs {
				s.StockChanged(id)
			}
		case domain.OrdersChanged:
			for _, id := range an.IDs {
				s.OrderChanged(id)
			}
		}
	}
}
