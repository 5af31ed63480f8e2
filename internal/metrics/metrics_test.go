package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"flashsale/internal/metrics"
)

// A metric declared here is flashsale_<name> in the default registry, and
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
	defer func() {
		if recover() == nil {
			t.Fatal("a second metric of the same name was accepted")
		}
	}()
	metrics.Counter("metrics_test_total", "Again.")
}
