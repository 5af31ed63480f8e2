package persistence

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// Subscription is a subscription to announcement channels, read by its
// owner with Next from a loop of its own (the router's, the live
// subscriptions', the gate's); Close ends it. It starts no goroutine and
// calls nothing back: go-redis's reader fills a buffer of size messages,
// which Next drains, and re-subscribes by itself after a lost connection
// (then Next says Missed).
type Subscription struct {
	ps *redis.PubSub
	ch <-chan any
	// sharded is the subscription to sharded channels (SSUBSCRIBE), if
	// any: a connection of its own, to the shard that serves them.
	sharded   *redis.PubSub
	shardedCh <-chan any
	// missed lists the channels whose (re)subscription Next reports as
	// domain.Missed.
	missed map[string]bool
	decode func(channel, payload string) (domain.Announcement, bool)
}

// errSubscriptionClosed is returned by Next after Close.
var errSubscriptionClosed = errors.New("announcement subscription closed")

func subscribe(ctx context.Context, rdb redis.UniversalClient, size int, missed []string,
	decode func(channel, payload string) (domain.Announcement, bool), channels ...string) *Subscription {
	ps := rdb.Subscribe(ctx, channels...)
	s := &Subscription{ps: ps, ch: ps.ChannelWithSubscriptions(redis.WithChannelSize(size)), missed: map[string]bool{}, decode: decode}
	for _, c := range missed {
		s.missed[c] = true
	}
	return s
}

// Next blocks until the next announcement, or until ctx ends (ctx's
// error) or the subscription is closed. Messages it cannot read are
// skipped.
func (s *Subscription) Next(ctx context.Context) (domain.Announcement, error) {
	for {
		select {
		case <-ctx.Done():
			return domain.Announcement{}, ctx.Err()
		case msg, open := <-s.ch:
			if a, ok, closed := s.read(msg, open); closed {
				return domain.Announcement{}, errSubscriptionClosed
			} else if ok {
				return a, nil
			}
		case msg, open := <-s.shardedCh: // nil, so never ready, without sharded channels
			if a, ok, closed := s.read(msg, open); closed {
				return domain.Announcement{}, errSubscriptionClosed
			} else if ok {
				return a, nil
			}
		}
	}
}

// read decodes one message from a subscription's channel, open unless
// Close closed it: an announcement (ok), nothing to announce, or the end
// of the subscription (closed).
func (s *Subscription) read(msg any, open bool) (_ domain.Announcement, ok, closed bool) {
	if !open {
		return domain.Announcement{}, false, true
	}
	switch m := msg.(type) {
	case *redis.Subscription:
		if (m.Kind == "subscribe" || m.Kind == "ssubscribe") && s.missed[m.Channel] {
			return domain.Announcement{Kind: domain.Missed}, true, false
		}
	case *redis.Message:
		a, ok := s.decode(m.Channel, m.Payload)
		return a, ok, false
	}
	return domain.Announcement{}, false, false
}

// Close ends the subscription.
func (s *Subscription) Close() error {
	var err error
	if s.sharded != nil {
		err = s.sharded.Close()
	}
	if err := errors.Join(s.ps.Close(), err); err != nil {
		return fmt.Errorf("close announcement subscription: %w", err)
	}
	return nil
}
