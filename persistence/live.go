package persistence

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// publishTimeout bounds an order announcement made after a change has
// committed: the change stands whether or not it is announced. The
// channels and what they carry are in keys.go.
const publishTimeout = time.Second

// Live announces and watches the changes the live subscriptions follow.
type Live struct{ rdb redis.UniversalClient }

// NewLive returns the announcer and watcher over rdb (the background
// client: its watcher holds a pub/sub connection for ever).
func NewLive(rdb redis.UniversalClient) *Live { return &Live{rdb: rdb} }

// PublishStock announces that the stock of the vouchers changed.
func (l *Live) PublishStock(ctx context.Context, voucherIDs []int64) error {
	if err := l.rdb.Publish(ctx, stockChannel, joinIDs(voucherIDs)).Err(); err != nil {
		return fmt.Errorf("announce stock change: %w", err)
	}
	return nil
}

// Watch calls stock with every voucher whose stock changed (announced
// by a node's sales or by the voucher events: restock, returns, status),
// order with every order announced, and resync whenever the subscription
// is (re)established. It returns when ctx ends.
func (l *Live) Watch(ctx context.Context, stock, order func(id int64), resync func()) error {
	subscribed := func(channel string) {
		if channel == eventsChannel {
			resync()
		}
	}
	return watch(ctx, l.rdb, 1024, subscribed, func(m *redis.Message) {
		switch m.Channel {
		case eventsChannel:
			if id, ok := voucherIDFromKey(m.Payload); ok {
				stock(id)
			}
		case stockChannel:
			eachID(m.Payload, stock)
		case orderChannel:
			eachID(m.Payload, order)
		}
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

func eachID(list string, f func(int64)) {
	for s := range strings.SplitSeq(list, ",") {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			f(id)
		}
	}
}
