package actors

import (
	"context"
	"fmt"

	"flashsale/domain"
)

// Announcements is a subscription to the cluster's voucher events
// (persistence.Subscription from persistence.Stock.Subscribe), read one
// at a time.
type Announcements interface {
	Next(ctx context.Context) (domain.Announcement, error)
}

// Follow tells the actors on this node about every voucher event of a
// until ctx ends (nil then): a changed voucher's actors reload it (Changed),
// and every actor reloads when announcements may have been missed
// (Resync). The caller owns a and closes it after Follow returns.
func (r *Router) Follow(ctx context.Context, a Announcements) error {
	for {
		an, err := a.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("voucher events: %w", err)
		}
		switch an.Kind {
		case domain.Missed:
			r.Resync()
		case domain.VoucherChanged:
			for _, id := range an.IDs {
				r.Changed(id)
			}
		}
	}
}
