package node

import (
	"context"
	"sync"

	"flashsale/internal/lifecycle"
	"flashsale/persistence"
)

// follower is a loop fed by a Redis pub/sub subscription (the router's
// voucher events, live stock's announcements, the gate's changes): Start
// subscribes before it returns, so that nothing announced once the part
// has started is missed, and runs follow on the subscription in a loop of
// its own; Stop ends the loop and closes the subscription.
type follower struct {
	subscribe func(ctx context.Context) *persistence.Subscription
	follow    func(ctx context.Context, sub *persistence.Subscription)

	mu   sync.Mutex
	loop *lifecycle.Loop
}

var _ lifecycle.Service = (*follower)(nil)

func newFollower(subscribe func(ctx context.Context) *persistence.Subscription,
	follow func(ctx context.Context, sub *persistence.Subscription)) *follower {
	return &follower{subscribe: subscribe, follow: follow}
}

func (f *follower) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loop != nil {
		return nil
	}
	// The subscription lives as long as the loop, not as the start.
	sub := f.subscribe(context.WithoutCancel(ctx))
	f.loop = lifecycle.NewLoop(func(ctx context.Context) {
		defer sub.Close()
		f.follow(ctx, sub)
	})
	return f.loop.Start(ctx)
}

func (f *follower) Stop() {
	f.mu.Lock()
	loop := f.loop
	f.mu.Unlock()
	if loop != nil {
		loop.Stop()
	}
}
