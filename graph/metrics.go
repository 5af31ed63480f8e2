package graph

import "github.com/prometheus/client_golang/prometheus"

// subscriptionsOpen counts live GraphQL subscriptions (stockChanged,
// orderChanged) on this node: each holds a goroutine and a slot in the
// publisher, so it is what an operator watches for a leak.
var subscriptionsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: "flashsale", Name: "subscriptions_open",
	Help: "GraphQL subscriptions open on this node.",
})

func init() { prometheus.MustRegister(subscriptionsOpen) }

// SubscriptionOpened records a subscription that starts; pair every call
// with one SubscriptionClosed when it ends, however it ends.
func SubscriptionOpened() { subscriptionsOpen.Inc() }

// SubscriptionClosed records a subscription that ended.
func SubscriptionClosed() { subscriptionsOpen.Dec() }
