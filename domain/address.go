package domain

import "net/netip"

// ClientKey is the address every per-address limit counts a client under:
// an IPv4 address as it is (also written IPv4-mapped, ::ffff:a.b.c.d),
// and an IPv6 address's /64. A /64 is the smallest block one host or one
// customer is given whole (SLAAC and privacy addresses pick any of its
// 2^64 addresses), so a limit counting IPv6 addresses one by one would
// give one host a fresh allowance per address it picks. The key has no
// zone. The zero Addr (an unknown peer) is its own key.
func ClientKey(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64) // errors only for bits out of range
		return p.Addr()
	}
	return a
}

// ParseClientKey is ClientKey of a host written as text (a request's
// RemoteAddr without its port); the zero Addr when it is no address, so
// that every unknown peer shares one key.
func ParseClientKey(host string) netip.Addr {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ClientKey(a)
}
