package persistence

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Voucher events: the scripts that change a voucher outside a grab
// announce it on eventsChannel, and every node's watcher tells its actors
// to reload.

// Announce tells every node's actors that a voucher changed outside the
// grab script (for code that changes stock or status without one of the
// scripts here, which announce by themselves).
func (s *Stock) Announce(ctx context.Context, voucherID int64) error {
	if err := s.rdb.Publish(ctx, eventsChannel, metaKey(voucherID)).Err(); err != nil {
		return fmt.Errorf("announce voucher %d: %w", voucherID, err)
	}
	return nil
}

// Watch calls changed with the id of every voucher announced on the events
// channel, and resync whenever the subscription is (re)established, since
// announcements made while it was down are lost. It returns when ctx ends.
func (s *Stock) Watch(ctx context.Context, changed func(voucherID int64), resync func()) error {
	return watch(ctx, s.rdb, 1024, func(string) { resync() }, func(m *redis.Message) {
		if id, ok := voucherIDFromKey(m.Payload); ok {
			changed(id)
		}
	}, eventsChannel)
}
