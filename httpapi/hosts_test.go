package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The guard's reading of a Host: the port ignored, IPv6 in brackets,
// names without case and without a trailing dot; anything malformed is
// foreign.
func TestLocalHostsAllowsThisMachineAndTheListedNames(t *testing.T) {
	t.Parallel()
	h, err := NewLocalHosts([]string{"Flashsale.test", "192.0.2.7", "[2001:db8::7]", "2001:db8::8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"localhost:8080", true},
		{"LOCALHOST:8080", true},
		{"localhost.:8080", true},
		{"127.0.0.1:8080", true},
		{"127.0.0.2", true},
		{"[::1]:8080", true},
		{"[::1]", true},
		{"[::ffff:127.0.0.1]:8080", true},
		{"flashsale.test:8080", true},
		{"FLASHSALE.TEST", true},
		{"192.0.2.7:8080", true},
		{"[2001:db8::7]:8080", true},
		{"[2001:db8::8]", true},
		{"", false},
		{"attacker.example", false},
		{"localhost.attacker.example", false},
		{"flashsale.test.attacker.example:8080", false},
		{"127.0.0.1.nip.io", false},
		{"192.0.2.8", false},
		{"[::2]:8080", false},
		{"::1", false},    // IPv6 needs brackets in a Host
		{"[::1", false},   // unclosed
		{"[::1]x", false}, // junk after the bracket
		{"localhost:x", false},
		{"0.0.0.0:8080", false},
	} {
		if got := h.Allows(tc.host); got != tc.want {
			t.Errorf("Allows(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

// A listed entry is a name or an address, nothing more.
func TestCheckAllowedHost(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"flashsale.test", "my-laptop", "192.0.2.7", "::1", "[::1]", "2001:db8::1"} {
		if err := CheckAllowedHost(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "http://flashsale.test", "flashsale.test:8080", "[::1]:8080", "[::1", "*.example.com", "a/b", "[not-ip]"} {
		if err := CheckAllowedHost(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A refused request reaches nothing behind the guard and gets 421 with
// the fixed answer.
func TestLocalHostsGuardRefusesBeforeTheHandler(t *testing.T) {
	t.Parallel()
	h, _ := NewLocalHosts(nil)
	reached := false
	g := h.Guard(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://attacker.example/", nil))
	if reached || rec.Code != http.StatusMisdirectedRequest || !strings.Contains(rec.Body.String(), `"code":"FORBIDDEN"`) {
		t.Fatalf("reached %v, %d %s", reached, rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:8080/", nil))
	if !reached {
		t.Fatalf("a local Host did not reach the handler: %d", rec.Code)
	}
}
