package gate

import (
	"net/netip"
	"testing"
	"time"

	"flashsale/domain"
)

// The blocklist as every node holds it: users and networks, for one
// voucher or all, until their expiry.
func TestBlocklist(t *testing.T) {
	t.Parallel()
	now := time.Now()
	net := func(s string) netip.Prefix {
		p, err := domain.ParseNet(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	l := newBlocklist([]domain.Block{
		{UserID: 1},               // everywhere, for ever
		{UserID: 2, VoucherID: 7}, // voucher 7 only
		{UserID: 3, ExpiresAt: now.Add(-time.Millisecond)},          // expired
		{UserID: 4, ExpiresAt: now.Add(time.Minute)},                // until later
		{Net: net("198.51.100.0/24")},                               // a network everywhere
		{Net: net("2001:db8::/32"), VoucherID: 7},                   // an IPv6 network on voucher 7
		{Net: net("203.0.113.9"), ExpiresAt: now.Add(-time.Second)}, // an expired address
	})
	cases := []struct {
		name    string
		user    int64
		ip      string
		voucher int64
		want    bool
	}{
		{"a user blocked everywhere", 1, "", 5, true},
		{"a user blocked on this voucher", 2, "", 7, true},
		{"the same user on another voucher", 2, "", 8, false},
		{"a user whose block expired", 3, "", 7, false},
		{"a user blocked until later", 4, "", 7, true},
		{"a free user", 9, "192.0.2.1", 7, false},
		{"an address in a blocked network", 9, "198.51.100.200", 5, true},
		{"an IPv4-mapped address in it", 9, "::ffff:198.51.100.200", 5, true},
		{"an IPv6 address on its voucher", 9, "2001:db8::1", 7, true},
		{"the IPv6 address on another voucher", 9, "2001:db8::1", 8, false},
		{"an address whose block expired", 9, "203.0.113.9", 5, false},
		{"no address", 9, "", 5, false},
		{"an unparsable address", 9, "not-an-ip", 5, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.blocks(tc.user, tc.ip, tc.voucher, now); got != tc.want {
				t.Fatalf("blocked = %v, want %v", got, tc.want)
			}
		})
	}
}
