package writer

import "flashsale/internal/metrics"

// The writers' metrics (the stores count what they insert: see
// persistence's flashsale_orders_persisted_total).
var (
	orderLogLag = metrics.Gauge("order_log_lag",
		"Orders accepted in Redis and not yet committed to the database (all order logs).")
	orderWriteErrors = metrics.Counter("order_write_errors_total",
		"Failed attempts to commit a batch of orders (retried with backoff).")
	orderLogPending = metrics.Gauge("order_log_pending",
		"Order-log entries delivered to a writer and not yet acknowledged (all order logs, all writers).")
	// orderLogLagSeconds is the age of the oldest unhandled entry: an
	// acknowledged entry is deleted at once, so a log's first entry is its
	// oldest unhandled one, and its id is its append time.
	orderLogLagSeconds = metrics.Gauge("order_log_lag_seconds",
		"Age of the oldest order-log entry not yet committed to the database (0 when every log is empty).")
	redPacketLogLag = metrics.Gauge("red_packet_log_lag",
		"Grabbed packets in the red-packet order logs, not yet in the database.")
	redPacketWriteErrors = metrics.Counter("red_packet_write_errors_total",
		"Failed attempts of the red-packet writer (each is retried).")
	writerRestarts = metrics.CounterVec("writer_restarts_total",
		"Restarts of a persistence actor by its supervisor after a failure, by family.",
		"family")
)
