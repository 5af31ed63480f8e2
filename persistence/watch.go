package persistence

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// watch subscribes to channels and, until ctx ends, calls subscribed with
// the channel of every subscription (re)established (messages sent while
// it was down are lost, so the caller re-syncs there) and message with
// every message. size is the buffer between go-redis's reader and this
// loop. It is the one loop under Stock.Watch, Live.Watch and Gate.Watch.
func watch(ctx context.Context, rdb redis.UniversalClient, size int, subscribed func(channel string), message func(*redis.Message), channels ...string) error {
	ps := rdb.Subscribe(ctx, channels...)
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(size))
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-ch:
			if !ok {
				return nil
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					subscribed(m.Channel)
				}
			case *redis.Message:
				message(m)
			}
		}
	}
}
