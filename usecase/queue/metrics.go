package queue

import "flashsale/internal/metrics"

var (
	joins          = metrics.Counter("queue_joins_total", "Users who joined a voucher's waiting room (once each).")
	admitted       = metrics.Counter("queue_admitted_total", "Users this node's pacer admitted from a waiting room with a grab ticket; the rate is the admission rate.")
	expiredTickets = metrics.Counter("queue_expired_tickets_total", "Admission tickets that expired unused, freeing their slot for the next in line.")
	roomResets     = metrics.Counter("queue_resets_total", "Waiting rooms whose line was emptied because Redis held it from another process (a restart from older files, a promotion without REDIS_ACK_REPLICAS, a flush).")
	subscribers    = metrics.Gauge("queue_subscribers", "queueChanged subscriptions open on this node.")
	waiting        = metrics.Gauge("queue_waiting", "Users waiting in the open rooms this node paces, at its last run.")
	admissionWait  = metrics.Histogram("queue_admission_wait_seconds", "From joining a waiting room (from its opening for an early one) to admission.",
		[]float64{0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600})
)
