package persistence

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// publishTimeout bounds an order announcement made after a change has
// committed: the change stands whether or not it is announced. The
// channels and what they carry are in keys.go.
const publishTimeout = time.Second

// Live announces the changes the live subscriptions follow, and
// subscribes to them.
type Live struct{ rdb redis.UniversalClient }

// NewLive returns the announcer over rdb (the background client: a
// subscription holds a pub/sub connection for ever).
func NewLive(rdb redis.UniversalClient) *Live { return &Live{rdb: rdb} }

// PublishStock announces that the stock of the vouchers changed.
func (l *Live) PublishStock(ctx context.Context, voucherIDs []int64) error {
	if err := l.rdb.Publish(ctx, stockChannel, joinIDs(voucherIDs)).Err(); err != nil {
		return fmt.Errorf("announce stock change: %w", err)
	}
	return nil
}

// Subscribe subscribes to what the live subscriptions follow: a
// domain.StockChanged for every voucher whose stock changed (announced by
// a node's sales or by the voucher events: restock, returns, status), a
// domain.OrdersChanged for every order announced, and a domain.Missed
// whenever the voucher events are (re)subscribed. The owner reads it with
// Next and closes it.
func (l *Live) Subscribe(ctx context.Context) *Subscription {
	return subscribe(ctx, l.rdb, 1024, []string{eventsChannel}, func(channel, payload string) (domain.Announcement, bool) {
		switch channel {
		case eventsChannel:
			id, ok := voucherIDFromKey(payload)
			return domain.Announcement{Kind: domain.StockChanged, IDs: []int64{id}}, ok
		case stockChannel:
			ids := parseIDs(payload)
			return domain.Announcement{Kind: domain.StockChanged, IDs: ids}, len(ids) > 0
		case orderChannel:
			ids := parseIDs(payload)
			return domain.Announcement{Kind: domain.OrdersChanged, IDs: ids}, len(ids) > 0
		}
		return domain.Announcement{}, false
	}, stockChannel, orderChannel, eventsChannel)
}

// announceOrders tells every node's subscribers that these orders changed.
// It runs after the change committed, so a failure only delays what
// subscribers see (to their next change): it is logged, not returned.
func announceOrders(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger, ids []int64) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := rdb.Publish(ctx, orderChannel, joinIDs(ids)).Err(); err != nil {
		log.WarnContext(ctx, "order change not announced to subscribers", "orders", len(ids), "err", err)
	}
}

func joinIDs(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// parseIDs reads a joinIDs list, skipping what is no id.
func parseIDs(list string) []int64 {
	var ids []int64
	for s := range strings.SplitSeq(list, ",") {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}
