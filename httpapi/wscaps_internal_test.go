package httpapi

import "testing"

// The per-address socket cap counts an IPv6 /64 as one client: its
// addresses share the cap, and a slot given back by one serves another.
func TestSocketCapsCountA64AsOneClient(t *testing.T) {
	c := newSocketCaps(2, 100, 100)
	a, ok := c.takeIP("2001:db8:1:2::a")
	if !ok {
		t.Fatal("the first socket was refused")
	}
	if _, ok := c.takeIP("2001:db8:1:2::b"); !ok {
		t.Fatal("the second socket was refused")
	}
	if _, ok := c.takeIP("2001:db8:1:2:ffff::c"); ok {
		t.Fatal("a third address of the /64 got a third slot")
	}
	if _, ok := c.takeIP("2001:db8:1:3::a"); !ok {
		t.Fatal("the next /64 was refused")
	}
	c.mu.Lock()
	give(c.ips, a)
	c.mu.Unlock()
	if _, ok := c.takeIP("2001:db8:1:2::d"); !ok {
		t.Fatal("a slot given back did not serve another address of the /64")
	}
}
