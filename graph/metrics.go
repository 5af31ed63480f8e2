package graph

import "flashsale/internal/metrics"

// subscriptionsOpen counts live GraphQL subscriptions (stockChanged,
// orderChanged) on this node: each holds a goroutine and a slot in the
// publisher, so it is what an operator watches for a leak.
var subscriptionsOpen = metrics.Gauge("subscriptions_open", "GraphQL subscriptions open on this node.")

// SubscriptionOpened records a subscription that starts; pair every call
// with one SubscriptionClosed when it ends, however it ends.
func SubscriptionOpened() { subscriptionsOpen.Inc() }

// SubscriptionClosed records a subscription that ended.
func SubscriptionClosed() { subscriptionsOpen.Dec() }
