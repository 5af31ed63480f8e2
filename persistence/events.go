package persistence

import (
	"context"
	"fmt"

	"flashsale/domain"
)

// Voucher events: the scripts that change a voucher outside a grab
// announce it on eventsChannel, and every node's router, reading its
// subscription, tells its actors to reload.

// Announce tells every node's actors that a voucher changed outside the
// grab script (for code that changes stock or status without one of the
// scripts here, which announce by themselves).
func (s *Stock) Announce(ctx context.Context, voucherID int64) error {
	if err := s.rdb.Publish(ctx, eventsChannel, metaKey(voucherID)).Err(); err != nil {
		return fmt.Errorf("announce voucher %d: %w", voucherID, err)
	}
	return nil
}

// Subscribe subscribes to the voucher events: every voucher announced is
// a domain.VoucherChanged, and every (re)subscription a domain.Missed,
// since announcements made while it was down are lost. The owner reads it
// with Next and closes it.
func (s *Stock) Subscribe(ctx context.Context) *Subscription {
	return subscribe(ctx, s.rdb, 1024, []string{eventsChannel}, func(_, payload string) (domain.Announcement, bool) {
		id, ok := voucherIDFromKey(payload)
		return domain.Announcement{Kind: domain.VoucherChanged, IDs: []int64{id}}, ok
	}, eventsChannel)
}
