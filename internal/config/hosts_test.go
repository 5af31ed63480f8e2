package config

import (
	"slices"
	"strings"
	"testing"
)

// EMBEDDED_ALLOWED_HOSTS is a list of names or addresses, none by
// default; an entry with a port, a scheme or a wildcard stops the start
// with a line naming the variable.
func TestEmbeddedAllowedHostsAreNamesOrAddresses(t *testing.T) {
	t.Parallel()
	if c, err := load(nil); err != nil || len(c.EmbeddedAllowedHosts) != 0 {
		t.Fatalf("default: %v (%v), want none", c.EmbeddedAllowedHosts, err)
	}
	c, err := load(map[string]string{"EMBEDDED_ALLOWED_HOSTS": " flashsale.test , 192.0.2.7,[::1] "})
	if want := []string{"flashsale.test", "192.0.2.7", "[::1]"}; err != nil || !slices.Equal(c.EmbeddedAllowedHosts, want) {
		t.Fatalf("list: %v (%v), want %v", c.EmbeddedAllowedHosts, err, want)
	}
	for _, bad := range []string{"flashsale.test:8080", "http://flashsale.test", "*.example.com"} {
		_, err := load(map[string]string{"EMBEDDED_ALLOWED_HOSTS": bad})
		if err == nil || !strings.Contains(err.Error(), "EMBEDDED_ALLOWED_HOSTS") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
}
