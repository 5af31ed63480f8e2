package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"flashsale/internal/metrics"
)

// A metric declared here is flashsale_<name> in the default registry and
// in Declared with its kind and labels, and
// a second declaration of one name fails at once rather than report
// nothing.
func TestADeclaredMetricIsRegisteredUnderTheNamespace(t *testing.T) {
	c := metrics.CounterVec("metrics_test_total", "A test counter.", "kind")
	c.WithLabelValues("a").Add(3)
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		if f.GetName() == "flashsale_metrics_test_total" {
			found = f.GetMetric()[0].GetCounter().GetValue() == 3
		}
	}
	if !found {
		t.Fatal("flashsale_metrics_test_total with 3 not gathered from the default registry")
	}
	metrics.HistogramVec("metrics_test_seconds", "A test histogram.", []float64{1}, "code")
	listed := map[string]metrics.Metric{}
	for _, m := range metrics.Declared() {
		listed[m.Name] = m
	}
	if m := listed["flashsale_metrics_test_total"]; m.Kind != metrics.KindCounter || len(m.Labels) != 1 || m.Labels[0] != "kind" {
		t.Fatalf("Declared lists the counter as %+v, want a counter labelled kind", m)
	}
	if got := listed["flashsale_metrics_test_seconds"].Series(); len(got) != 3 || got[0] != "flashsale_metrics_test_seconds_bucket" {
		t.Fatalf("a histogram's series: %v, want _bucket, _sum and _count", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second metric of the same name was accepted")
		}
	}()
	metrics.Counter("metrics_test_total", "Again.")
}
