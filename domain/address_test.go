package domain_test

import (
	"net/netip"
	"testing"

	"flashsale/domain"
)

func TestClientKeyGroupsIPv6By64AndKeepsIPv4Whole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ host, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"},
		{"2001:db8:1:2::1", "2001:db8:1:2::"},
		{"fe80::1%eth0", "fe80::"},
		{"::1", "::"},
		{"not an address", "invalid IP"},
		{"", "invalid IP"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			if got := domain.ParseClientKey(tc.host).String(); got != tc.want {
				t.Errorf("ParseClientKey(%q) = %s, want %s", tc.host, got, tc.want)
			}
		})
	}
	a, b := netip.MustParseAddr("2001:db8:1:2::a"), netip.MustParseAddr("2001:db8:1:2:ffff::b")
	if domain.ClientKey(a) != domain.ClientKey(b) {
		t.Error("two addresses of one /64 have different keys")
	}
	if domain.ClientKey(a) == domain.ClientKey(netip.MustParseAddr("2001:db8:1:3::a")) {
		t.Error("two /64s share a key")
	}
	if k := domain.ClientKey(a); domain.ClientKey(k) != k {
		t.Error("a key's key is not itself")
	}
}
