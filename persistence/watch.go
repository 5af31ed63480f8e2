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
		case msg, ok := <-s.ch:
			if !ok {
				return domain.Announcement{}, errSubscriptionClosed
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" && s.missed[m.Channel] {
					return domain.Announcement{Kind: domain.Missed}, nil
				}
			case *redis.Message:
				if a, ok := s.decode(m.Channel, m.Payload); ok {
					return a, nil
				}
			}
		}
	}
}

// Close ends the subscription.
func (s *Subscription) Close() error {
	if err := s.ps.Close(); err != nil {
		return fmt.Errorf("close announcement subscription: %w", err)
	}
	return nil
}
