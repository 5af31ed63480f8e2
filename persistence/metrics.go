package persistence

import "github.com/prometheus/client_golang/prometheus"

// The persistence metrics, in one place: namespaced and low-cardinality
// (a label only for a dead letter's reason, a short fixed set).
var (
	orderLogLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "order_log_lag",
		Help: "Orders accepted in Redis and not yet committed to the database (all order logs).",
	})
	ordersPersisted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "orders_persisted_total",
		Help: "Orders inserted into tb_voucher_order by the order writer.",
	})
	orderWriteErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "order_write_errors_total",
		Help: "Failed attempts to commit a batch of orders (retried with backoff).",
	})
	ordersAdopted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "orders_adopted_total",
		Help: "Orders sold before Redis lost a voucher and reloaded it from the database, put back into the reloaded stock.",
	})
	ordersDead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "orders_dead_total",
		Help: "Order-log entries the database refused for good, kept in tb_order_dead_letter, by reason.",
	}, []string{"reason"})
)

func init() {
	prometheus.MustRegister(orderLogLag, ordersPersisted, orderWriteErrors, ordersAdopted, ordersDead)
}
