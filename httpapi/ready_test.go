package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"flashsale/httpapi"
)

// A node whose reloads still hold vouchers cannot sell them: /readyz says
// so with 503 and the count, and says ready again once they sell;
// flashsale_ready follows each answer (the readiness alert reads it).
func TestReadyzIsUnavailableWhileAReloadHoldsVouchers(t *testing.T) {
	held := 2
	rd := &httpapi.Readiness{
		Redis: func(context.Context) (string, error) { return "", nil },
		DB:    func(context.Context) error { return nil },
		Held:  func() int { return held },
	}
	probe := func() (int, string) {
		rec := httptest.NewRecorder()
		rd.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "2 voucher(s)") {
		t.Fatalf("/readyz with 2 vouchers held: %d %q, want 503 naming them", code, body)
	}
	if got := readyGauge(t); got != 0 {
		t.Fatalf("flashsale_ready after a 503: %v, want 0", got)
	}
	held = 0
	if code, body := probe(); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz with none held: %d %q, want 200 ready", code, body)
	}
	if got := readyGauge(t); got != 1 {
		t.Fatalf("flashsale_ready after a 200: %v, want 1", got)
	}
}

// readyGauge reads flashsale_ready from the default registry.
func readyGauge(t *testing.T) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "flashsale_ready" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no flashsale_ready series after a probe")
	return 0
}
