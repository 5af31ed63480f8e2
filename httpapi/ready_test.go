package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"flashsale/httpapi"
)

// A node whose reloads still hold vouchers cannot sell them: /readyz says
// so with 503 and the count, and says ready again once they sell.
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
	held = 0
	if code, body := probe(); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz with none held: %d %q, want 200 ready", code, body)
	}
}
