// Package metrics declares the service's Prometheus metrics: every one
// is named flashsale_<name> and registered with the default registry
// when its package is initialised, through the constructors here, so
// that no package repeats the namespace or its registration. Each is
// also listed (Declared), so that what reads the series (the dashboard
// and the alerts in deploy/) can be checked against them before a
// labelled one has its first sample.
package metrics

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric of the service.
const Namespace = "flashsale"

// Counter declares and registers flashsale_<name>.
func Counter(name, help string) prometheus.Counter {
	return register(KindCounter, name, nil, prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}))
}

// CounterVec declares and registers flashsale_<name> with labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(KindCounter, name, labels, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels))
}

// Gauge declares and registers flashsale_<name>.
func Gauge(name, help string) prometheus.Gauge {
	return register(KindGauge, name, nil, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}))
}

// GaugeVec declares and registers flashsale_<name> with labels.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(KindGauge, name, labels, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels))
}

// Histogram declares and registers flashsale_<name> with its buckets.
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register(KindHistogram, name, nil, prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec declares and registers flashsale_<name> with its buckets
// and labels.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(KindHistogram, name, labels, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels))
}

// Kind is a metric's type, which decides the series it exposes.
type Kind string

// The kinds the constructors declare.
const (
	KindCounter   Kind = "counter"
	KindGauge     Kind = "gauge"
	KindHistogram Kind = "histogram"
)

// Metric is one declared metric.
type Metric struct {
	Name   string // flashsale_<name>
	Kind   Kind
	Labels []string
}

// Series are the names of the series it exposes: a histogram's _bucket
// (with le), _sum and _count; the name itself otherwise.
func (m Metric) Series() []string {
	if m.Kind == KindHistogram {
		return []string{m.Name + "_bucket", m.Name + "_sum", m.Name + "_count"}
	}
	return []string{m.Name}
}

var (
	declaredMu sync.Mutex
	declared   []Metric
)

// Declared lists the metrics declared so far, by name: those of every
// package the caller's binary links, once their init ran.
func Declared() []Metric {
	declaredMu.Lock()
	defer declaredMu.Unlock()
	out := slices.Clone(declared)
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func register[C prometheus.Collector](kind Kind, name string, labels []string, c C) C {
	prometheus.MustRegister(c)
	declaredMu.Lock()
	declared = append(declared, Metric{Name: Namespace + "_" + name, Kind: kind, Labels: slices.Clone(labels)})
	declaredMu.Unlock()
	return c
}
