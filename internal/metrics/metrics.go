// Package metrics declares the service's Prometheus metrics: every one
// is named flashsale_<name> and registered with the default registry
// when its package is initialised, through the constructors here, so
// that no package repeats the namespace or its registration.
package metrics

import "github.com/prometheus/client_golang/prometheus"

// Namespace prefixes every metric of the service.
const Namespace = "flashsale"

// Counter declares and registers flashsale_<name>.
func Counter(name, help string) prometheus.Counter {
	return register(prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}))
}

// CounterVec declares and registers flashsale_<name> with labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels))
}

// Gauge declares and registers flashsale_<name>.
func Gauge(name, help string) prometheus.Gauge {
	return register(prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}))
}

// GaugeVec declares and registers flashsale_<name> with labels.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels))
}

// Histogram declares and registers flashsale_<name> with its buckets.
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register(prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec declares and registers flashsale_<name> with its buckets
// and labels.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels))
}

func register[C prometheus.Collector](c C) C {
	prometheus.MustRegister(c)
	return c
}
