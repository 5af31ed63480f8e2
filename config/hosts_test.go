package config

import (
	"slices"
	"testing"
)

// EMBEDDED_ALLOWED_HOSTS is a list of names or addresses, none by
// default (httpapi checks each: see the owners' test).
func TestEmbeddedAllowedHostsAreNamesOrAddresses(t *testing.T) {
	t.Parallel()
	if c, err := load(nil); err != nil || len(c.EmbeddedAllowedHosts) != 0 {
		t.Fatalf("default: %v (%v), want none", c.EmbeddedAllowedHosts, err)
	}
	c, err := load(map[string]string{"EMBEDDED_ALLOWED_HOSTS": " flashsale.test , 192.0.2.7,[::1] "})
	if want := []string{"flashsale.test", "192.0.2.7", "[::1]"}; err != nil || !slices.Equal(c.EmbeddedAllowedHosts, want) {
		t.Fatalf("list: %v (%v), want %v", c.EmbeddedAllowedHosts, err, want)
	}
}
