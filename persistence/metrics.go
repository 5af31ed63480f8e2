package persistence

import "github.com/prometheus/client_golang/prometheus"

// The persistence metrics, in one place: namespaced and low-cardinality
// (labels only from short fixed sets: a dead letter's reason, a store, a grab code).
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
	breakerState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "breaker_state",
		Help: "Circuit breaker state per store: 0 closed, 1 half-open, 2 open.",
	}, []string{"store"})
	fallbackGrabs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "fallback_grab_total",
		Help: "Grabs answered by the database fallback while Redis was down, by outcome.",
	}, []string{"code"})
)

func init() {
	prometheus.MustRegister(orderLogLag, ordersPersisted, orderWriteErrors, ordersAdopted, ordersDead, breakerState, fallbackGrabs)
}
