package writer

import "github.com/prometheus/client_golang/prometheus"

// The writers' metrics (the stores count what they insert: see
// persistence's flashsale_orders_persisted_total).
var (
	orderLogLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "order_log_lag",
		Help: "Orders accepted in Redis and not yet committed to the database (all order logs).",
	})
	orderWriteErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "order_write_errors_total",
		Help: "Failed attempts to commit a batch of orders (retried with backoff).",
	})
	orderLogPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "order_log_pending",
		Help: "Order-log entries delivered to a writer and not yet acknowledged (all order logs, all writers).",
	})
	// orderLogLagSeconds is the age of the oldest unhandled entry: an
	// acknowledged entry is deleted at once, so a log's first entry is its
	// oldest unhandled one, and its id is its append time.
	orderLogLagSeconds = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "order_log_lag_seconds",
		Help: "Age of the oldest order-log entry not yet committed to the database (0 when every log is empty).",
	})
	redPacketLogLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "red_packet_log_lag",
		Help: "Grabbed packets in the red-packet order logs, not yet in the database.",
	})
	redPacketWriteErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "red_packet_write_errors_total",
		Help: "Failed attempts of the red-packet writer (each is retried).",
	})
	writerRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "writer_restarts_total",
		Help: "Restarts of a persistence actor by its supervisor after a failure, by family.",
	}, []string{"family"})
)

func init() {
	prometheus.MustRegister(orderLogLag, orderWriteErrors, orderLogPending, orderLogLagSeconds,
		redPacketLogLag, redPacketWriteErrors, writerRestarts)
}
