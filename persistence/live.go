package persistence

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
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
	if err := publishLive(ctx, l.rdb, stockChannel, joinIDs(voucherIDs)); err != nil {
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
//
// On a Redis Cluster with sharded pub/sub (shardedPubSub) the stock and
// order announcements travel on sharded channels, on a pub/sub connection
// of their own to the shard that serves them; a (re)subscription of
// those is a domain.Missed too.
func (l *Live) Subscribe(ctx context.Context) *Subscription {
	decode := func(channel, payload string) (domain.Announcement, bool) {
		switch channel {
		case eventsChannel:
			id, ok := voucherIDFromKey(payload)
			return domain.Announcement{Kind: domain.StockChanged, IDs: []int64{id}}, ok
		case stockChannel, shardedStockChannel:
			ids := parseIDs(payload)
			return domain.Announcement{Kind: domain.StockChanged, IDs: ids}, len(ids) > 0
		case orderChannel, shardedOrderChannel:
			ids := parseIDs(payload)
			return domain.Announcement{Kind: domain.OrdersChanged, IDs: ids}, len(ids) > 0
		}
		return domain.Announcement{}, false
	}
	// The plain channels are followed in every mode: a node whose
	// question about sharded pub/sub failed publishes there.
	s := subscribe(ctx, l.rdb, 1024, []string{eventsChannel, shardedStockChannel}, decode, stockChannel, orderChannel, eventsChannel)
	if !shardedPubSub(ctx, l.rdb) {
		return s
	}
	s.sharded = l.rdb.SSubscribe(ctx, shardedStockChannel, shardedOrderChannel)
	s.shardedCh = s.sharded.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	return s
}

// publishLive publishes one of the live channels (stockChannel,
// orderChannel): on its sharded twin where the servers have sharded
// pub/sub. A plain PUBLISH in a Redis Cluster goes to every node of the
// cluster over its bus; SPUBLISH only to the shard that serves the
// channel, where the subscribers listen.
func publishLive(ctx context.Context, rdb redis.UniversalClient, channel, payload string) error {
	if !shardedPubSub(ctx, rdb) {
		return rdb.Publish(ctx, channel, payload).Err()
	}
	sharded := map[string]string{stockChannel: shardedStockChannel, orderChannel: shardedOrderChannel}[channel]
	return rdb.SPublish(ctx, sharded, payload).Err()
}

// shardedClients remembers, per cluster client, whether its servers have
// sharded pub/sub: asked once, so that a node's publishers and its
// subscribers decide alike.
var shardedClients sync.Map // *redis.ClusterClient -> bool

// shardedPubSub says whether rdb is a Redis Cluster client whose servers
// have sharded pub/sub (Redis 7.0 and later: COMMAND INFO knows
// SPUBLISH). One server or Sentinel keep plain PUBLISH: there it reaches
// the one server either way. A failed question is asked again next time.
func shardedPubSub(ctx context.Context, rdb redis.UniversalClient) bool {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return false
	}
	if v, ok := shardedClients.Load(cc); ok {
		return v.(bool)
	}
	info, err := cc.Do(ctx, "command", "info", "spublish").Slice()
	if err != nil {
		return false
	}
	has := len(info) == 1 && info[0] != nil // an unknown command's entry is nil
	shardedClients.Store(cc, has)
	return has
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
	if err := publishLive(ctx, rdb, orderChannel, joinIDs(ids)); err != nil {
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
